//! The real-control-plane tier: unisched against upstream etcd, kube-apiserver 1.37.2 and
//! kube-controller-manager, started by `e2e/upstream/control-plane` (one per test).
//!
//! Built only with the `upstream-tier` feature (`e2e/upstream/tier` runs it after building the
//! binaries); a missing binary fails the test, it never skips it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod parity;

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use common::{ChildGuard, bin, wait_for};
use serde_json::Value;

/// The repository root.
fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One real control plane in a fresh directory, stopped when dropped; the directory (etcd data,
/// audit log: ~60 MB) is removed too unless the test failed, when its logs are the diagnosis.
struct ControlPlane {
    dir: PathBuf,
}

impl ControlPlane {
    fn start(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("unisched-upstream-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Command::new(repo().join("e2e/upstream/control-plane"))
            .arg("start")
            .arg(&dir)
            .output()
            .expect("running e2e/upstream/control-plane");
        let cp = ControlPlane { dir };
        assert!(
            out.status.success(),
            "control plane did not start:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        cp
    }

    fn admin(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    fn scheduler(&self) -> PathBuf {
        self.dir.join("scheduler.kubeconfig")
    }

    /// `kubectl --kubeconfig admin.kubeconfig ARGS`; panics on failure.
    fn kubectl(&self, args: &[&str]) -> String {
        let (ok, out, err) = common::kubectl(&self.admin(), args);
        assert!(ok, "kubectl {args:?} failed: {err}");
        out
    }

    fn kubectl_json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl(&a)).unwrap()
    }

    /// The audit log's events (the API server writes it in batches: give it a moment).
    fn audit_events(&self) -> Vec<Value> {
        std::thread::sleep(Duration::from_secs(2));
        let text = std::fs::read_to_string(self.dir.join("audit.log")).unwrap_or_default();
        text.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("e2e/upstream/control-plane"))
            .arg("stop")
            .arg(&self.dir)
            .output();
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Runs `unisched sim ARGS -o json`; asserts it settled (exit 0) and returns the report.
fn sim_json(args: &[&str]) -> Value {
    sim_json_exit(args, &[0])
}

/// Like [`sim_json`], accepting any of the exit codes given (3: did not settle in time).
fn sim_json_exit(args: &[&str], codes: &[i32]) -> Value {
    let out = Command::new(bin())
        .arg("sim")
        .args(args)
        .args(["-o", "json", "--v", "0"])
        .output()
        .unwrap();
    assert!(
        out.status.code().is_some_and(|c| codes.contains(&c)),
        "unisched sim {args:?} exited {:?}:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// pod → (node, devices, reason and message): what must agree between two runs of a scenario.
type Placements = BTreeMap<String, (Value, Vec<String>, Value)>;

fn placements(report: &Value) -> Placements {
    report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let devices = p["claims"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["devices"].as_array().cloned().unwrap_or_default())
                .map(|d| format!("{}/{}/{}", d["driver"], d["pool"], d["device"]))
                .collect();
            (
                format!(
                    "{}/{}",
                    p["namespace"].as_str().unwrap(),
                    p["name"].as_str().unwrap()
                ),
                (
                    p["node"].clone(),
                    devices,
                    serde_json::json!([p["reason"], comparable(p)]),
                ),
            )
        })
        .collect()
}

/// The pod's message with what legitimately differs between two runs taken out: the names of
/// claims generated from templates (kube-controller-manager adds a random suffix) and the example
/// device of an allocation failure (any of the equally full devices may be named).
fn comparable(pod: &Value) -> Value {
    let Some(mut m) = pod["message"].as_str().map(str::to_string) else {
        return Value::Null;
    };
    for c in pod["claims"].as_array().into_iter().flatten() {
        if let Some(name) = c["name"].as_str() {
            m = m.replace(name, "<claim>");
        }
    }
    while let (Some(a), Some(b)) = (m.find(" (e.g. device "), m.find(").")) {
        if b < a {
            break;
        }
        m.replace_range(a..b + 1, "");
    }
    Value::String(m)
}

fn scenario(rel: &str) -> String {
    repo().join(rel).to_string_lossy().into_owned()
}

/// Runs a scenario on the embedded control plane and on the real one; returns both reports.
fn both(cp: &ControlPlane, rel: &str) -> (Value, Value) {
    let path = scenario(rel);
    let embedded = sim_json(&[&path]);
    let admin = cp.admin();
    let real = sim_json(&[&path, "--kubeconfig", admin.to_str().unwrap(), "--timeout", "60"]);
    (embedded, real)
}

#[test]
fn quickstart_places_exactly_as_on_the_embedded_control_plane() {
    let cp = ControlPlane::start("quickstart");
    let (embedded, real) = both(&cp, "examples/quickstart");
    assert_eq!(placements(&embedded), placements(&real));
    assert_eq!(real["summary"]["scheduled"], 5, "{real:#}");
    assert_eq!(real["summary"]["unschedulable"], 1, "{real:#}");
    // The run deleted what it created: no demo pods are left.
    let pods = cp.kubectl_json(&["get", "pods", "-A", "-l", "sim.unisched.dev/run"]);
    assert_eq!(pods["items"].as_array().map(Vec::len), Some(0), "{pods:#}");
}

/// Scenarios whose placements, devices and reasons must be the same on kube-apiserver (with the
/// real ResourceClaim controller) as on the embedded control plane. Excluded, with the reason in
/// docs/sim-fidelity.md: volumes/provisioned (no provisioner runs beside the real control plane),
/// preemption/minimal-victims (victims of equal priority are ordered by start time, which only a
/// kubelet sets; checked separately below).
const SAME_ON_BOTH: &[&str] = &[
    "e2e/scenarios/dra/claim-templates",
    "e2e/scenarios/dra/shared-claims",
    "e2e/scenarios/dra/extended-resource",
    "e2e/scenarios/dra/kep5517-fungible",
    "e2e/scenarios/dra/kep5517-grouped",
    "e2e/scenarios/dra/kep5517-individual",
    "e2e/scenarios/dra/kep5517-overhead",
    "e2e/scenarios/dra/kep5517-partitionable",
    "e2e/scenarios/dra/overcommit-through-claim",
    "e2e/scenarios/dra/release-on-delete",
    "e2e/scenarios/preemption/claim-cpu",
    "e2e/scenarios/preemption/claim-device",
    "e2e/scenarios/preemption/pdb",
    "e2e/scenarios/scoring/cpu-claims",
    "e2e/scenarios/scoring/gpu-packing",
    "e2e/scenarios/spread/anti-affinity",
    "e2e/scenarios/spread/zone-spread",
    "e2e/scenarios/volumes/attributes-class",
    "e2e/scenarios/volumes/local-pv",
    "e2e/scenarios/volumes/missing-claim",
    "e2e/scenarios/volumes/storage-capacity",
    "e2e/scenarios/volumes/volume-attachments",
    "e2e/scenarios/workload/basic-policy",
    "e2e/scenarios/workload/gang-preemption",
    "e2e/scenarios/workload/topology",
];
// Not `workload/gang-all-or-nothing`: its placements are the same on both (no member of the gang
// bound), but on kube-apiserver the members reach the queue one watch event at a time, and
// which partial attempt of the group a member's message comes from varies from run to run (seen
// once in CI: `first placement status: pod group is unschedulable` from an attempt with fewer
// pods than minCount). Its all-or-nothing outcome on the real plane is checked by the Job test
// below and by the differential.

#[test]
fn scenarios_place_exactly_as_on_the_embedded_control_plane() {
    let cp = ControlPlane::start("scenarios");
    let mut differences = Vec::new();
    for rel in SAME_ON_BOTH {
        let (embedded, real) = both(&cp, rel);
        let (e, r) = (placements(&embedded), placements(&real));
        if e != r {
            differences.push(format!("{rel}:\n  embedded {e:?}\n  real     {r:?}"));
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

#[test]
fn kep5004_and_kep5517_statuses_are_accepted_by_kube_apiserver() {
    let cp = ControlPlane::start("statuses");
    let admin = cp.admin();
    let kc = admin.to_str().unwrap();
    let ext = sim_json(&[
        &scenario("e2e/scenarios/dra/extended-resource"),
        "--kubeconfig",
        kc,
    ]);
    let with_status: Vec<&Value> = ext["pods"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| !p["extendedResourceClaimStatus"].is_null())
        .collect();
    assert!(
        !with_status.is_empty(),
        "no pod has extendedResourceClaimStatus: {ext:#}"
    );
    for p in &with_status {
        let claim = p["extendedResourceClaimStatus"]["resourceClaimName"]
            .as_str()
            .unwrap();
        assert!(
            p["claims"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["name"] == claim && !c["devices"].as_array().unwrap().is_empty()),
            "the special claim {claim} has no devices: {p:#}"
        );
    }
    let cpu = sim_json(&[
        &scenario("e2e/scenarios/dra/kep5517-individual"),
        "--kubeconfig",
        kc,
    ]);
    assert!(
        cpu["pods"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["nodeAllocatableResourceClaimStatuses"]
                .as_array()
                .is_some_and(|s| !s.is_empty())),
        "no pod has nodeAllocatableResourceClaimStatuses: {cpu:#}"
    );
}

#[test]
fn preemption_of_equal_priority_victims_evicts_as_many_as_on_the_embedded_plane() {
    let cp = ControlPlane::start("victims");
    let (embedded, real) = both(&cp, "e2e/scenarios/preemption/minimal-victims");
    let (e, r) = (placements(&embedded), placements(&real));
    let urgent = |m: &Placements| {
        m.iter()
            .find(|(k, _)| k.ends_with("/urgent"))
            .map(|(_, v)| v.0.clone())
    };
    assert_eq!(urgent(&e), urgent(&r));
    assert!(
        urgent(&r).is_some_and(|n| n.is_string()),
        "urgent not placed: {r:?}"
    );
    assert_eq!(
        e.len(),
        r.len(),
        "a different number of victims left:\n{e:?}\n{r:?}"
    );
}

#[test]
fn an_unfit_pod_gets_the_upstream_reason_in_its_event_and_condition() {
    let cp = ControlPlane::start("reason");
    let admin = cp.admin();
    let report = sim_json(&[
        &scenario("examples/quickstart"),
        "--kubeconfig",
        admin.to_str().unwrap(),
        "--keep",
    ]);
    assert!(
        report["pods"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "too-big")
    );
    let pod = cp.kubectl_json(&["get", "pod", "too-big", "-n", "demo"]);
    let cond = pod["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "PodScheduled")
        .cloned()
        .expect("PodScheduled condition");
    assert_eq!(cond["status"], "False");
    assert_eq!(cond["reason"], "Unschedulable");
    let message = cond["message"].as_str().unwrap();
    assert!(
        message.starts_with("0/3 nodes are available: 3 Insufficient cpu."),
        "{message}"
    );
    let events = cp.kubectl_json(&[
        "get",
        "events.events.k8s.io",
        "-n",
        "demo",
        "--field-selector",
        "regarding.name=too-big",
    ]);
    let failed: Vec<&Value> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["reason"] == "FailedScheduling")
        .collect();
    assert!(!failed.is_empty(), "no FailedScheduling event: {events:#}");
    assert!(
        failed.iter().all(|e| e["note"].as_str() == Some(message)),
        "event note differs from the condition: {failed:#?}"
    );
    assert_eq!(failed[0]["reportingController"], "unisched");
}

/// `(verb, apiGroup, resource[/subresource])` of an audit event.
fn audit_key(e: &Value) -> (String, String, String) {
    let o = &e["objectRef"];
    let mut resource = o["resource"].as_str().unwrap_or_default().to_string();
    if let Some(sub) = o["subresource"].as_str() {
        resource = format!("{resource}/{sub}");
    }
    (
        e["verb"].as_str().unwrap_or_default().to_string(),
        o["apiGroup"].as_str().unwrap_or_default().to_string(),
        resource,
    )
}

/// What deploy/manifests/rbac.yaml grants: (verb, group, resource) triples, with the rules of the
/// bootstrap ClusterRole system:auth-delegator (TokenReviews and SubjectAccessReviews of secure
/// serving) and of the bootstrap Role extension-apiserver-authentication-reader (the API server's
/// authentication ConfigMap) that it binds. Non-resource rules (the metrics reader's) grant no API
/// call.
fn granted() -> BTreeSet<(String, String, String)> {
    let text = std::fs::read_to_string(repo().join("deploy/manifests/rbac.yaml")).unwrap();
    let mut out = BTreeSet::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap();
        if v["roleRef"]["name"] == "system:auth-delegator" {
            for (group, resource) in [
                ("authentication.k8s.io", "tokenreviews"),
                ("authorization.k8s.io", "subjectaccessreviews"),
            ] {
                out.insert(("create".to_string(), group.to_string(), resource.to_string()));
            }
        }
        if v["roleRef"]["name"] == "extension-apiserver-authentication-reader" {
            for verb in ["get", "list", "watch"] {
                out.insert((verb.to_string(), String::new(), "configmaps".to_string()));
            }
        }
        for rule in v["rules"].as_array().into_iter().flatten() {
            let Some(groups) = rule["apiGroups"].as_array() else {
                continue;
            };
            for g in groups {
                for r in rule["resources"].as_array().unwrap() {
                    for verb in rule["verbs"].as_array().unwrap() {
                        out.insert((
                            verb.as_str().unwrap().to_string(),
                            g.as_str().unwrap().to_string(),
                            r.as_str().unwrap().to_string(),
                        ));
                    }
                }
            }
        }
    }
    out
}

/// What deploy/README.md's permission table documents: (verb, group, resource) triples.
fn documented() -> BTreeSet<(String, String, String)> {
    let text = std::fs::read_to_string(repo().join("deploy/README.md")).unwrap();
    let mut out = BTreeSet::new();
    let rows = text
        .lines()
        .skip_while(|l| !l.starts_with("| API group | resource | verbs |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    for row in rows {
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let group = cells[0].trim_matches('`').trim_matches('"');
        for resource in cells[1].split(',').filter_map(|r| r.split_whitespace().next()) {
            for verb in cells[2].split(',').map(str::trim) {
                out.insert((verb.to_string(), group.to_string(), resource.to_string()));
            }
        }
    }
    assert!(!out.is_empty(), "deploy/README.md has no permission table");
    out
}

/// Starts `unisched run` with the ServiceAccount's kubeconfig and leader election. Secure serving
/// is on (a free loopback port, the deployed flags: no CA files), so that the audit sees the calls
/// it makes too: the API server's authentication ConfigMap, read and watched.
fn run_scheduler(cp: &ControlPlane, config: Option<&Path>) -> ChildGuard {
    let secure_port = common::free_port().to_string();
    let mut cmd = Command::new(bin());
    cmd.arg("run").arg("--kubeconfig").arg(cp.scheduler()).args([
        "--leader-elect=true",
        "--leader-elect-resource-namespace",
        "unisched-system",
        "--metrics-bind-address",
        "127.0.0.1:0",
        "--bind-address",
        "127.0.0.1",
        "--secure-port",
        &secure_port,
        "--v",
        "0",
    ]);
    if let Some(c) = config {
        cmd.arg("--config").arg(c);
    }
    ChildGuard(cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap())
}

const SA: &str = "system:serviceaccount:unisched-system:unisched";

#[test]
fn the_deployed_identity_is_never_denied_and_uses_only_what_rbac_grants() {
    let cp = ControlPlane::start("rbac");
    let scheduler = run_scheduler(&cp, None);
    let admin = cp.admin();
    let kc = admin.to_str().unwrap();
    for rel in [
        "examples/quickstart",
        "e2e/scenarios/dra/extended-resource",
        "e2e/scenarios/preemption/claim-device",
        "e2e/scenarios/volumes/local-pv",
        "e2e/scenarios/volumes/storage-capacity",
    ] {
        let report = sim_json(&[
            &scenario(rel),
            "--kubeconfig",
            kc,
            "--no-scheduler",
            "--timeout",
            "60",
        ]);
        assert!(
            report["summary"]["scheduled"].as_u64().unwrap() > 0,
            "{rel}: {report:#}"
        );
    }
    drop(scheduler);
    let events = cp.audit_events();
    let all_ours: Vec<&Value> = events.iter().filter(|e| e["user"]["username"] == SA).collect();
    // Discovery is the one non-resource request: whether PodGroups are served (every
    // authenticated user may ask, through system:discovery). Nothing else goes without a rule.
    let (discovery, ours): (Vec<&Value>, Vec<&Value>) = all_ours
        .into_iter()
        .partition(|e| e.get("objectRef").is_none_or(Value::is_null));
    for e in &discovery {
        assert_eq!(
            e["requestURI"], "/apis/scheduling.k8s.io/v1beta1",
            "a non-resource request other than PodGroup discovery: {e}"
        );
    }
    assert!(
        ours.len() > 50,
        "too few requests by {SA} in the audit log: {}",
        ours.len()
    );
    let denied: BTreeSet<_> = ours
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 403)
        .map(|e| audit_key(e))
        .collect();
    assert!(denied.is_empty(), "requests denied to unisched: {denied:?}");
    let grants = granted();
    let ungranted: BTreeSet<_> = ours
        .iter()
        .map(|e| audit_key(e))
        .filter(|k| !grants.contains(k))
        .collect();
    assert!(
        ungranted.is_empty(),
        "requests outside deploy/ RBAC: {ungranted:?}"
    );
    // Secure serving without CA flags reads the API server's authentication ConfigMap: a get
    // before serving, then a list and a watch by name; nothing else of kube-system's.
    let configmap_calls: BTreeSet<(String, String, String)> = ours
        .iter()
        .filter(|e| e["objectRef"]["resource"] == "configmaps")
        .map(|e| {
            let o = &e["objectRef"];
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (text(&e["verb"]), text(&o["namespace"]), text(&o["name"]))
        })
        .collect();
    let expected: BTreeSet<(String, String, String)> = ["get", "list", "watch"]
        .into_iter()
        .map(|verb| {
            (
                verb.to_string(),
                "kube-system".to_string(),
                "extension-apiserver-authentication".to_string(),
            )
        })
        .collect();
    assert_eq!(configmap_calls, expected, "the authentication ConfigMap's calls");
    // The calls a real server saw are the code's own table; the operator's table must hold them.
    let docs = documented();
    let undocumented: BTreeSet<_> = ours
        .iter()
        .map(|e| audit_key(e))
        .filter(|k| !docs.contains(k))
        .collect();
    assert!(
        undocumented.is_empty(),
        "requests missing from deploy/README.md's permission table: {undocumented:?}"
    );
    eprintln!("audit: {} requests by {SA}, 0 denied", ours.len());
}

/// A node with `n` GPUs and `n` pods that each want one through a claim template.
fn gpu_batch(dir: &Path, n: usize) -> PathBuf {
    let devices: Vec<String> = (0..n).map(|i| format!("    - name: gpu-{i}")).collect();
    let mut yaml = format!(
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {{name: gpu.example.com}}\nspec:\n  selectors:\n  - cel: {{expression: 'device.driver == \"gpu.example.com\"'}}\n---\n\
         apiVersion: v1\nkind: Node\nmetadata:\n  name: big\n  labels: {{kubernetes.io/hostname: big}}\nstatus:\n  capacity: {{cpu: '1000', memory: 1000Gi, pods: '500'}}\n  allocatable: {{cpu: '1000', memory: 1000Gi, pods: '500'}}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {{name: big-gpus}}\nspec:\n  driver: gpu.example.com\n  nodeName: big\n  pool: {{name: big, generation: 1, resourceSliceCount: 1}}\n  devices:\n{}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {{name: one-gpu, namespace: batch}}\nspec:\n  spec:\n    devices:\n      requests:\n      - name: gpu\n        exactly: {{deviceClassName: gpu.example.com}}\n",
        devices.join("\n")
    );
    for i in 0..n {
        yaml.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: job-{i:03}, namespace: batch}}\nspec:\n  schedulerName: unisched\n  containers:\n  - name: c\n    image: registry.k8s.io/pause:3.10\n    resources:\n      requests: {{cpu: 100m}}\n      claims: [{{name: gpu}}]\n  resourceClaims:\n  - name: gpu\n    resourceClaimTemplateName: one-gpu\n"
        ));
    }
    let path = dir.join("batch.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

fn lease_holder(cp: &ControlPlane) -> Option<String> {
    let (ok, out, _) = common::kubectl(
        &cp.admin(),
        &[
            "get",
            "lease",
            "unisched",
            "-n",
            "unisched-system",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
    );
    (ok && !out.is_empty()).then_some(out)
}

#[test]
fn sigkill_of_the_leader_mid_batch_binds_every_pod_once_and_no_device_twice() {
    let cp = ControlPlane::start("failover");
    let dir = common::tempdir("upstream-failover");
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
         leaderElection: {leaderElect: true, leaseDuration: 4s, renewDeadline: 3s, retryPeriod: 1s, resourceNamespace: unisched-system}\n\
         profiles: [{schedulerName: unisched}]\n",
    )
    .unwrap();
    let mut first = run_scheduler(&cp, Some(&config));
    let leader = wait_for(Duration::from_secs(30), || lease_holder(&cp)).expect("a leader");
    let second = run_scheduler(&cp, Some(&config));
    let n = 60;
    let scenario = gpu_batch(&dir, n);
    let admin = cp.admin();
    let runner = Command::new(bin())
        .arg("sim")
        .arg(&scenario)
        .arg("--kubeconfig")
        .arg(&admin)
        .args(["--no-scheduler", "--timeout", "90", "-o", "json", "--v", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Kill the leader once part of the batch is bound.
    wait_for(Duration::from_secs(60), || {
        let pods = cp.kubectl_json(&["get", "pods", "-n", "batch"]);
        let bound = pods["items"]
            .as_array()?
            .iter()
            .filter(|p| p["spec"]["nodeName"].is_string())
            .count();
        (bound >= 5).then_some(())
    })
    .expect("the first leader binds pods");
    first.0.kill().unwrap();
    let killed = Instant::now();
    let _ = first.0.wait();
    let new_leader = wait_for(Duration::from_secs(30), || {
        lease_holder(&cp).filter(|h| *h != leader)
    })
    .expect("the standby takes the lease");
    let takeover = killed.elapsed();
    let out = runner.wait_with_output().unwrap();
    assert!(out.status.success(), "the batch did not settle");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    drop(second);
    assert_eq!(report["summary"]["scheduled"], n, "{report:#}");
    let mut devices = BTreeSet::new();
    for p in report["pods"].as_array().unwrap() {
        for c in p["claims"].as_array().unwrap() {
            for d in c["devices"].as_array().unwrap() {
                assert!(
                    devices.insert(d["device"].as_str().unwrap().to_string()),
                    "device {d} allocated twice"
                );
            }
        }
    }
    assert_eq!(devices.len(), n, "every pod has its own GPU");
    // Per pod: bindings answered 201, and bindings whose answer was lost because the leader was
    // killed while they were under way (kube-apiserver audits those 5xx "context canceled",
    // although the write may have committed: the pod is then bound with no 201 on record).
    let mut bindings: BTreeMap<String, usize> = BTreeMap::new();
    let mut lost: BTreeMap<String, usize> = BTreeMap::new();
    for e in cp.audit_events() {
        if e["objectRef"]["subresource"] != "binding"
            || e["verb"] != "create"
            || e["stage"] != "ResponseComplete"
        {
            continue;
        }
        let pod = e["objectRef"]["name"].as_str().unwrap_or_default().to_string();
        let code = e["responseStatus"]["code"].as_i64().unwrap_or_default();
        if code == 201 {
            *bindings.entry(pod).or_default() += 1;
        } else if code >= 500
            && e["responseStatus"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("context canceled"))
        {
            *lost.entry(pod).or_default() += 1;
        }
    }
    assert!(
        bindings.values().all(|&c| c == 1),
        "a pod was bound twice: {bindings:?}"
    );
    let unanswered: Vec<&String> = report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["name"].as_str())
        .filter(|name| !bindings.contains_key(*name))
        .map(|name| {
            lost.keys()
                .find(|k| k.as_str() == name)
                .unwrap_or_else(|| panic!("{name} bound with no binding on record: {bindings:?} {lost:?}"))
        })
        .collect();
    assert!(
        bindings.len() + unanswered.len() == n && unanswered.len() <= 16,
        "every pod bound by one binding; only the killed leader's in-flight ones unanswered: {bindings:?} {lost:?}"
    );
    eprintln!(
        "failover: leader {leader} killed, {new_leader} leads after {:.1}s (leaseDuration 4s); \
         {n} pods bound once each, {} distinct devices",
        takeover.as_secs_f64(),
        devices.len()
    );
}

/// Writes `yaml` to a file and applies it with the admin kubeconfig; returns (ok, stderr).
fn apply(cp: &ControlPlane, name: &str, yaml: &str) -> (bool, String) {
    let path = cp.dir.join(name);
    std::fs::write(&path, yaml).unwrap();
    let (ok, _, err) = common::kubectl(&cp.admin(), &["apply", "-f", path.to_str().unwrap()]);
    (ok, err)
}

#[test]
fn kube_apiserver_rejects_invalid_dra_objects_and_unisched_explains_the_rest() {
    let cp = ControlPlane::start("badinput");
    let (ok, err) = apply(
        &cp,
        "bad-cel.yaml",
        "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: bad}\nspec:\n  selectors:\n  - cel: {expression: 'device.driver =='}\n",
    );
    assert!(!ok && err.contains("compilation failed"), "{err}");
    let (ok, err) = apply(
        &cp,
        "dup.yaml",
        "apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: dup}\nspec:\n  driver: gpu.example.com\n  allNodes: true\n  pool: {name: p, generation: 1, resourceSliceCount: 1}\n  devices: [{name: gpu-0}, {name: gpu-0}]\n",
    );
    assert!(!ok && err.contains("Duplicate value"), "{err}");

    // Accepted by the API server, refused by the scheduler with a reason: a claim whose
    // DeviceClass does not exist, and a selector that reads an attribute the devices lack.
    let dir = common::tempdir("upstream-badinput");
    let path = dir.join("scenario.yaml");
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {kubernetes.io/hostname: n1}}\nstatus:\n  allocatable: {cpu: '8', memory: 8Gi, pods: '10'}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceSlice\nmetadata: {name: n1-gpus}\nspec:\n  driver: gpu.example.com\n  nodeName: n1\n  pool: {name: n1, generation: 1, resourceSliceCount: 1}\n  devices: [{name: gpu-0}]\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: reads-missing}\nspec:\n  selectors:\n  - cel: {expression: 'device.attributes[\"gpu.example.com\"].model == \"x\"'}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: no-class, namespace: default}\nspec:\n  devices:\n    requests:\n    - name: r\n      exactly: {deviceClassName: does-not-exist}\n---\n\
         apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: cel-error, namespace: default}\nspec:\n  devices:\n    requests:\n    - name: r\n      exactly: {deviceClassName: reads-missing}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: wants-missing-class, namespace: default}\nspec:\n  schedulerName: unisched\n  containers: [{name: c, image: x, resources: {claims: [{name: c}]}}]\n  resourceClaims: [{name: c, resourceClaimName: no-class}]\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: wants-cel-error, namespace: default}\nspec:\n  schedulerName: unisched\n  containers: [{name: c, image: x, resources: {claims: [{name: c}]}}]\n  resourceClaims: [{name: c, resourceClaimName: cel-error}]\n",
    )
    .unwrap();
    let admin = cp.admin();
    // A CEL runtime error fails the attempt with an Error status (as upstream), so that pod is
    // retried with backoff for ever; the run counts it as decided after its third error in a row
    // and ends with exit 0 (3 if it did not settle in time on a loaded machine).
    let report = sim_json_exit(
        &[
            path.to_str().unwrap(),
            "--kubeconfig",
            admin.to_str().unwrap(),
            "--timeout",
            "20",
        ],
        &[0, 3],
    );
    let reason = |name: &str| -> String {
        let p = report["pods"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap();
        assert!(p["node"].is_null(), "{name} was bound: {p:#}");
        p["message"].as_str().unwrap_or_default().to_string()
    };
    let missing = reason("wants-missing-class");
    assert!(missing.contains("does-not-exist"), "{missing}");
    let cel = reason("wants-cel-error");
    assert!(cel.contains("model"), "{cel}");
}

/// The differential against upstream kube-scheduler 1.37.2 (`e2e/upstream/diff`): every runnable
/// scenario, decided once by upstream and then by unisched with spec-only scoring and with the
/// default profile. A difference that upstream's own scores do not show to be a tie must be listed
/// in docs/upstream-diff.md with its cause.
#[test]
fn differential_against_upstream_has_only_declared_differences() {
    let out = Command::new(repo().join("e2e/upstream/diff"))
        .args([
            "--all",
            "--config",
            "config/spec-only-scoring.yaml",
            "--config",
            "default",
            "--check",
            "docs/upstream-diff.md",
        ])
        .env("UNISCHED_BIN", bin())
        .current_dir(repo())
        .output()
        .expect("running e2e/upstream/diff");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "undeclared differences:\n{stdout}\n{stderr}"
    );
    // Not vacuous: both configurations compared every runnable scenario.
    let compared = stdout.lines().filter(|l| l.starts_with("## ")).count();
    let scenarios = 1 + std::fs::read_dir(repo().join("e2e/scenarios"))
        .unwrap()
        .flat_map(|area| std::fs::read_dir(area.unwrap().path()).unwrap())
        .filter(|d| d.as_ref().unwrap().path().is_dir())
        .count()
        - 3; // e2e/upstream/diff's NOT_RUNNABLE: scoring/configs, volumes/provisioned,
    // volumes/storage-capacity-provisioned
    assert_eq!(compared, 2 * scenarios, "{stdout}");
    eprintln!(
        "{}",
        stdout
            .lines()
            .rev()
            .find(|l| l.contains("difference(s)"))
            .unwrap_or_default()
    );
}

/// `docs/upstream-parity.md` names every in-tree plugin of kube-scheduler 1.37.2, every field of
/// `KubeSchedulerConfiguration` v1 and of the plugins' args, and every gate the scheduler reads
/// (those `pkg/scheduler` names, and those `crates/features` lists as the scheduler's), all read
/// from upstream's Go sources in the module cache that `e2e/upstream/build` filled.
#[test]
fn the_parity_page_names_every_upstream_plugin_configuration_field_and_scheduler_gate() {
    let sources = parity::upstream::Sources::locate();
    let tables = parity::read_page();
    let mut unmentioned = Vec::new();

    let plugins = parity::table(&tables, parity::PLUGINS);
    let plugin_rows: BTreeSet<&str> = plugins.names(&plugins.columns[0]).into_iter().collect();
    let plugin_names = sources.plugin_names();
    for name in &plugin_names {
        if !plugin_rows.contains(name.as_str()) {
            unmentioned.push(format!("plugin {name}"));
        }
    }

    let configuration = parity::table(&tables, parity::CONFIGURATION);
    let field_rows = configuration.names(&configuration.columns[0]);
    let paths = sources.configuration_paths();
    for path in &paths {
        if !field_rows.iter().any(|row| parity::path_matches(row, path)) {
            unmentioned.push(format!("configuration field {path}"));
        }
    }

    let args = parity::table(&tables, parity::PLUGIN_ARGS);
    let (args_column, field_column) = (args.column(&args.columns[0]), args.column(&args.columns[1]));
    let args_paths = sources.args_paths();
    for (kind, fields) in &args_paths {
        let rows: Vec<&str> = args
            .rows
            .iter()
            .filter(|r| parity::code_spans(&r.cells[args_column]).first() == Some(&kind.as_str()))
            .filter_map(|r| parity::code_spans(&r.cells[field_column]).first().copied())
            .collect();
        for path in fields {
            if !rows.iter().any(|row| parity::path_matches(row, path)) {
                unmentioned.push(format!("{kind} field {path}"));
            }
        }
    }

    let gates = parity::table(&tables, parity::GATES);
    let gate_rows: BTreeSet<&str> = gates.names(&gates.columns[0]).into_iter().collect();
    let mut gate_names = sources.scheduler_gates();
    gate_names.extend(
        unisched_features::SCHEDULER_GATES
            .iter()
            .map(|(n, _)| n.to_string()),
    );
    for gate in &gate_names {
        if !gate_rows.contains(gate.as_str()) {
            unmentioned.push(format!("feature gate {gate}"));
        }
    }

    assert!(
        unmentioned.is_empty(),
        "docs/upstream-parity.md does not mention:\n{}",
        unmentioned.join("\n")
    );
    eprintln!(
        "upstream 1.37.2: {} plugins, {} configuration fields, {} args fields in {} args types, {} gates; all on the page",
        plugin_names.len(),
        paths.len(),
        args_paths.values().map(Vec::len).sum::<usize>(),
        args_paths.len(),
        gate_names.len()
    );
}

#[test]
fn from_cluster_copies_the_real_cluster_read_only_and_decides_its_pending_pod() {
    let cp = ControlPlane::start("from-cluster");
    let admin = cp.admin();
    let kc = admin.to_str().unwrap();
    // The live cluster: the quickstart, placed by unisched and kept; too-big stays pending there.
    let live = sim_json(&[
        &scenario("examples/quickstart"),
        "--kubeconfig",
        kc,
        "--keep",
        "--timeout",
        "60",
    ]);
    let live_placements = placements(&live);
    assert_eq!(live["summary"]["scheduled"], 5, "{live:#}");
    // The what-if: a node big enough for too-big.
    // Inside the control plane's directory, which goes when the test passes.
    let dir = cp.dir.join("whatif");
    std::fs::create_dir_all(&dir).unwrap();
    let node = dir.join("huge.yaml");
    std::fs::write(
        &node,
        "apiVersion: v1\nkind: Node\nmetadata: {name: huge, labels: {kubernetes.io/hostname: huge}}\nstatus:\n  capacity: {cpu: '64', memory: 256Gi, pods: '110'}\n  allocatable: {cpu: '64', memory: 256Gi, pods: '110'}\n",
    )
    .unwrap();
    let since = cp.audit_events().len();
    let copy = sim_json(&["--from-cluster", kc, node.to_str().unwrap(), "--timeout", "60"]);
    // Every pod bound in the live cluster is on the same node with the same devices in the copy.
    let copied = placements(&copy);
    for (pod, (node, devices, _)) in &live_placements {
        if node.is_null() {
            continue;
        }
        let (n, d, _) = copied
            .get(pod)
            .unwrap_or_else(|| panic!("{pod} not copied: {copy:#}"));
        assert_eq!((n, d), (node, devices), "{pod} moved in the copy");
    }
    let too_big = copy["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "too-big")
        .unwrap();
    assert_eq!(too_big["node"], "huge", "{copy:#}");
    assert_eq!(
        copy["fromCluster"]["pending"],
        serde_json::json!(["demo/too-big"])
    );
    assert_eq!(copy["fromCluster"]["rejected"], serde_json::json!([]), "{copy:#}");
    // Read only: the run's requests (the admin user's, after the mark) are all reads.
    let events = cp.audit_events();
    let reads: Vec<&Value> = events[since..]
        .iter()
        .filter(|e| e["user"]["username"] == "admin")
        .collect();
    let writes: Vec<(String, String, String)> = reads
        .iter()
        .map(|e| audit_key(e))
        .filter(|(verb, _, _)| !matches!(verb.as_str(), "get" | "list" | "watch"))
        .collect();
    assert!(
        reads.iter().filter(|e| e["verb"] == "list").count() >= 9,
        "one list per copied resource: {}",
        reads.len()
    );
    assert!(
        writes.is_empty(),
        "--from-cluster wrote to the cluster: {writes:?}"
    );
    // And the live cluster is as it was: too-big is still pending there.
    let pod = cp.kubectl_json(&["get", "pod", "-n", "demo", "too-big"]);
    assert!(pod["spec"]["nodeName"].is_null(), "{pod:#}");
}

/// `curl -sk` of `https://127.0.0.1:<port><path>` with extra arguments: `Some((status, body))`,
/// or `None` when no HTTP answer came (connection or TLS handshake refused).
fn https_get(port: u16, path: &str, extra: &[&str]) -> Option<(u16, String)> {
    let out = Command::new("curl")
        .args(["-sk", "--max-time", "10", "-w", "\n%{http_code}"])
        .args(extra)
        .arg(format!("https://127.0.0.1:{port}{path}"))
        .output()
        .expect("running curl");
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (body, code) = text.rsplit_once('\n')?;
    Some((code.trim().parse().ok()?, body.to_string()))
}

#[test]
fn secure_serving_delegates_authentication_and_authorization_to_kube_apiserver() {
    let cp = ControlPlane::start("secure");
    let dir = &cp.dir;
    // Service accounts with and without deploy/'s metrics-reader ClusterRole.
    cp.kubectl(&["create", "serviceaccount", "reader", "-n", "default"]);
    cp.kubectl(&["create", "serviceaccount", "nobody", "-n", "default"]);
    cp.kubectl(&[
        "create",
        "clusterrolebinding",
        "reader-metrics",
        "--clusterrole=unisched-metrics-reader",
        "--serviceaccount=default:reader",
    ]);
    let token = |sa: &str| {
        cp.kubectl(&["create", "token", sa, "-n", "default"])
            .trim()
            .to_string()
    };
    let (reader, nobody) = (token("reader"), token("nobody"));
    // A client certificate from a CA unisched does not trust.
    let (stranger_key, stranger_crt) = (dir.join("stranger.key"), dir.join("stranger.crt"));
    let ok = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=stranger",
        ])
        .arg("-keyout")
        .arg(&stranger_key)
        .arg("-out")
        .arg(&stranger_crt)
        .output()
        .unwrap()
        .status
        .success();
    assert!(ok, "openssl could not make a client certificate");

    let port = common::free_port();
    let _scheduler = ChildGuard(
        Command::new(bin())
            .arg("run")
            .arg("--kubeconfig")
            .arg(cp.scheduler())
            .args(["--leader-elect=false", "--bind-address", "127.0.0.1"])
            .args(["--secure-port", &port.to_string()])
            .arg("--client-ca-file")
            .arg(dir.join("ca.crt"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("unisched-secure.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let healthz = wait_for(Duration::from_secs(60), || {
        https_get(port, "/healthz", &[]).filter(|(code, _)| *code == 200)
    });
    assert!(healthz.is_some(), "/healthz never answered 200 over HTTPS");

    let bearer = |t: &str| format!("Authorization: Bearer {t}");
    let (code, body) = https_get(port, "/metrics", &[]).unwrap();
    assert_eq!(code, 403, "anonymous: {body}");
    assert!(
        body.contains(r#"User \"system:anonymous\" cannot get path \"/metrics\""#),
        "{body}"
    );
    let (code, body) = https_get(port, "/metrics", &["-H", &bearer("not-a-token")]).unwrap();
    assert_eq!(code, 401, "a token kube-apiserver rejects: {body}");
    let (code, body) = https_get(port, "/metrics", &["-H", &bearer(&nobody)]).unwrap();
    assert_eq!(code, 403, "no RBAC for /metrics: {body}");
    assert!(
        body.contains(r#"User \"system:serviceaccount:default:nobody\" cannot get path \"/metrics\""#),
        "{body}"
    );
    let (code, body) = https_get(port, "/metrics", &["-H", &bearer(&reader)]).unwrap();
    assert_eq!(code, 200, "bound to unisched-metrics-reader: {body}");
    assert!(body.contains("scheduler_pending_pods"), "{body}");
    let (code, _) = https_get(port, "/configz", &["-H", &bearer(&reader)]).unwrap();
    assert_eq!(code, 403, "the metrics reader may not read /configz");
    let stranger = https_get(
        port,
        "/metrics",
        &[
            "--cert",
            stranger_crt.to_str().unwrap(),
            "--key",
            stranger_key.to_str().unwrap(),
        ],
    );
    assert_eq!(
        stranger, None,
        "a certificate from a foreign CA is refused in the handshake"
    );
}

/// Runs openssl with `args`; panics when it fails.
fn openssl(args: &[&str]) {
    let out = Command::new("openssl").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Without `--client-ca-file`, unisched trusts the client CA that kube-apiserver publishes in
/// kube-system/extension-apiserver-authentication, as kube-scheduler does in a cluster (the
/// deployed RBAC lets it read that ConfigMap): a client certificate the cluster's CA signed, in
/// group system:masters, reads /configz over HTTPS; a self-signed one gets no connection.
#[test]
fn secure_serving_trusts_the_client_ca_of_the_api_servers_configmap() {
    let cp = ControlPlane::start("configmap-ca");
    let path = |name: &str| cp.dir.join(name).to_str().unwrap().to_string();
    let (key, csr, crt, ext) = (
        path("masters.key"),
        path("masters.csr"),
        path("masters.crt"),
        path("masters.ext"),
    );
    std::fs::write(&ext, "extendedKeyUsage=clientAuth\n").unwrap();
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/O=system:masters/CN=tier-admin",
        "-keyout",
        &key,
        "-out",
        &csr,
    ]);
    let (ca, ca_key) = (path("ca.crt"), path("ca.key"));
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        &ext,
        "-out",
        &crt,
    ]);
    let (stranger_key, stranger_crt) = (path("stranger.key"), path("stranger.crt"));
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/O=system:masters/CN=stranger",
        "-keyout",
        &stranger_key,
        "-out",
        &stranger_crt,
    ]);

    let port = common::free_port();
    let _scheduler = ChildGuard(
        Command::new(bin())
            .arg("run")
            .arg("--kubeconfig")
            .arg(cp.scheduler())
            .args(["--leader-elect=false", "--bind-address", "127.0.0.1"])
            .args(["--secure-port", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(cp.dir.join("unisched-configmap-ca.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let healthz = wait_for(Duration::from_secs(60), || {
        https_get(port, "/healthz", &[]).filter(|(code, _)| *code == 200)
    });
    assert!(healthz.is_some(), "/healthz never answered 200 over HTTPS");
    // The ConfigMap is read before the port is served: the first request already sees the CA.
    let (code, body) = https_get(port, "/configz", &["--cert", &crt, "--key", &key]).unwrap();
    assert_eq!(code, 200, "system:masters by the cluster's client CA: {body}");
    let (code, _) = https_get(port, "/configz", &[]).unwrap();
    assert_eq!(code, 403, "anonymous");
    let stranger = https_get(
        port,
        "/configz",
        &["--cert", &stranger_crt, "--key", &stranger_key],
    );
    assert_eq!(
        stranger, None,
        "a certificate the cluster's CA did not sign gets no connection"
    );
    // curl offers HTTP/2 by ALPN and gets it, as from kube-scheduler.
    let version = Command::new("curl")
        .args([
            "-sk",
            "--http2",
            "--max-time",
            "10",
            "-o",
            "/dev/null",
            "-w",
            "%{http_version}",
        ])
        .arg(format!("https://127.0.0.1:{port}/healthz"))
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version.stdout),
        "2",
        "the HTTP version curl negotiated"
    );
}

/// A Job of three 1-CPU pods with `scheduling.schedulingPolicy.gang.minCount: 3` on two 4-CPU
/// nodes: kube-controller-manager's Job controller (WorkloadWithJob) makes its Workload and
/// PodGroup and gives the pods their `schedulingGroup`; unisched places the gang whole and marks
/// the PodGroup scheduled. A second gang Job of three 3-CPU pods fits only two of them: none is
/// bound, and its PodGroup says why.
#[test]
fn a_job_whose_pod_group_the_job_controller_makes_is_gang_scheduled() {
    let cp = ControlPlane::start("job");
    let admin = cp.admin();
    let kc = admin.to_str().unwrap();
    sim_json(&[
        &scenario("e2e/scenarios/workload/job-cluster"),
        "--kubeconfig",
        kc,
        "--keep",
        "--no-scheduler",
    ]);
    let _scheduler = run_scheduler(&cp, None);
    let job = |name: &str, cpu: &str| {
        format!(
            r#"apiVersion: batch/v1
kind: Job
metadata: {{name: {name}, namespace: jobs}}
spec:
  parallelism: 3
  completions: 3
  scheduling:
    schedulingPolicy:
      gang: {{minCount: 3}}
  template:
    spec:
      schedulerName: unisched
      restartPolicy: Never
      containers:
      - {{name: c, image: registry.example/train:1, resources: {{requests: {{cpu: "{cpu}"}}}}}}
"#
        )
    };
    let (ok, err) = apply(&cp, "fits.yaml", &job("fits", "1"));
    assert!(ok, "{err}");
    let bound = |job: &str| -> (usize, usize, Vec<Value>) {
        let pods = cp.kubectl_json(&["get", "pods", "-n", "jobs", "-l", &format!("job-name={job}")]);
        let items = pods["items"].as_array().cloned().unwrap_or_default();
        let n = items
            .iter()
            .filter(|p| p["spec"]["nodeName"].as_str().is_some_and(|n| !n.is_empty()))
            .count();
        (n, items.len(), items)
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    while bound("fits").0 < 3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
    }
    let (n, total, items) = bound("fits");
    assert_eq!((n, total), (3, 3), "{items:#?}");
    for p in &items {
        assert!(
            p["spec"]["schedulingGroup"]["podGroupName"].as_str().is_some(),
            "the Job controller put the pod in a group: {p:#}"
        );
    }
    let groups = cp.kubectl_json(&["get", "podgroups.scheduling.k8s.io", "-n", "jobs"]);
    let fits_group = groups["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3)
        .cloned()
        .unwrap_or_else(|| panic!("no gang PodGroup: {groups:#}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    let condition = loop {
        let g = cp.kubectl_json(&[
            "get",
            "podgroups.scheduling.k8s.io",
            "-n",
            "jobs",
            fits_group["metadata"]["name"].as_str().unwrap(),
        ]);
        let c = g["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "PodGroupInitiallyScheduled")
            .cloned();
        if c.is_some() || Instant::now() > deadline {
            break c;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let condition = condition.expect("PodGroupInitiallyScheduled written");
    assert_eq!(condition["status"], "True", "{condition:#}");
    assert_eq!(condition["reason"], "Scheduled", "{condition:#}");

    let (ok, err) = apply(&cp, "too-big.yaml", &job("too-big", "3"));
    assert!(ok, "{err}");
    // Two of the three would fit (one per node after `fits`' three CPUs); a gang gets none. As
    // upstream, the member that did not fit keeps its own reason (`Insufficient cpu`) and the
    // members that would have fitted carry the group's (`pod group is unschedulable, …
    // minCount (3) cannot be satisfied: …`); which member is which depends on the order they
    // were tried.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut reasons = Vec::new();
    while Instant::now() < deadline {
        let (n, total, items) = bound("too-big");
        assert_eq!(
            n, 0,
            "a gang short of its quorum is never partly bound: {items:#?}"
        );
        reasons = items
            .iter()
            .filter_map(|p| {
                p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "PodScheduled" && c["status"] == "False")
                    .and_then(|c| c["message"].as_str().map(str::to_string))
            })
            .collect();
        if total == 3
            && reasons
                .iter()
                .any(|m| m.contains("minCount (3) cannot be satisfied"))
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let group_reason = reasons
        .iter()
        .find(|m| m.contains("minCount (3) cannot be satisfied"));
    assert!(
        group_reason.is_some_and(|m| m.starts_with("pod group is unschedulable, ")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .all(|m| m.starts_with("pod group is unschedulable, ") || m.contains("Insufficient cpu")),
        "every member says why: {reasons:?}"
    );
    assert_eq!(bound("too-big").0, 0);
}
