//! kubectl against the simulator: create, get, get -o yaml, apply, delete, the protobuf generators,
//! explain, diff and the scheduler's own manifests. kubectl must be on PATH: without it these tests
//! fail (they are the proof that kubectl works against the server, so they never pass vacuously).
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a failure is a panic.

use std::path::{Path, PathBuf};
use std::time::Duration;

use unisched_sim::ApiServer;

struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    async fn run(&self, args: &[&str]) -> (bool, String, String) {
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache)
            .arg("--request-timeout=10s");
        cmd.args(args).kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(30), cmd.output())
            .await
            .expect("kubectl timed out")
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), stdout, stderr)
    }

    async fn ok(&self, args: &[&str]) -> String {
        let (ok, out, err) = self.run(args).await;
        assert!(ok, "kubectl {args:?} failed:\nstdout: {out}\nstderr: {err}");
        out
    }
}

/// Fails the test when kubectl is missing.
fn require_kubectl() {
    let present = std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(present, "kubectl is not on PATH: these tests need it");
}

/// A served simulator (controllers as given) and kubectl configured for it in a fresh directory.
async fn serve(controllers: bool, tag: &str) -> (unisched_sim::RunningServer, Kubectl, PathBuf) {
    require_kubectl();
    let running = ApiServer::builder()
        .controllers(controllers)
        .build()
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!(
        "unisched-sim-kubectl-{tag}-{}-{}",
        std::process::id(),
        running.addr.port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let k = Kubectl {
        kubeconfig: PathBuf::from(write(&dir, "kubeconfig", &running.kubeconfig())),
        cache: dir.join("cache"),
    };
    (running, k, dir)
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_string_lossy().into_owned()
}

const POD: &str = "apiVersion: v1
kind: Pod
metadata:
  name: x
  labels: {app: web}
spec:
  containers:
  - name: c
    image: IMAGE
    resources:
      requests: {cpu: 100m, memory: 64Mi}
";

const TEMPLATE: &str = "apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: gpu
  namespace: team
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly:
          deviceClassName: DEVICE_CLASS
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_create_get_apply_delete() {
    let (running, k, dir) = serve(true, "crud").await;
    let pod_file = write(&dir, "pod.yaml", &POD.replace("IMAGE", "nginx:1"));

    let out = k.ok(&["create", "-f", &pod_file]).await;
    assert!(out.contains("pod/x created"), "{out}");
    let out = k.ok(&["get", "pods", "-A"]).await;
    assert!(
        out.contains("NAMESPACE") && out.lines().any(|l| l.starts_with("default") && l.contains(" x ")),
        "{out}"
    );
    let out = k.ok(&["get", "pod", "x", "-o", "yaml"]).await;
    assert!(
        out.contains("name: x") && out.contains("uid: ") && out.contains("image: nginx:1"),
        "{out}"
    );
    let out = k.ok(&["get", "pod", "x", "-o", "jsonpath={.status.phase}"]).await;
    assert_eq!(out, "Pending");

    let pod_file = write(&dir, "pod.yaml", &POD.replace("IMAGE", "nginx:2"));
    let out = k.ok(&["apply", "-f", &pod_file]).await;
    assert!(out.contains("pod/x configured"), "{out}");
    let stored = running.store().get("pods", Some("default"), "x").unwrap();
    assert_eq!(stored["spec"]["containers"][0]["image"], "nginx:2");
    let out = k.ok(&["apply", "-f", &pod_file]).await;
    assert!(out.contains("pod/x unchanged"), "{out}");

    // A namespaced DRA object in a new namespace, created and re-applied with a change.
    let ns_file = write(
        &dir,
        "ns.yaml",
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n",
    );
    k.ok(&["apply", "-f", &ns_file]).await;
    let tpl_file = write(
        &dir,
        "tpl.yaml",
        &TEMPLATE.replace("DEVICE_CLASS", "gpu.example.com"),
    );
    let out = k.ok(&["apply", "-f", &tpl_file]).await;
    assert!(out.contains("created"), "{out}");
    let out = k.ok(&["get", "resourceclaimtemplates", "-n", "team"]).await;
    assert!(out.contains("gpu"), "{out}");

    // kubectl asks for strict field validation: a typo is an error, as with a real API server.
    let typo = write(
        &dir,
        "typo.yaml",
        &POD.replace("IMAGE", "nginx:1")
            .replace("name: x", "name: typo")
            .replace("image:", "imagee:"),
    );
    let (ok, _, err) = k.run(&["create", "-f", &typo]).await;
    assert!(
        !ok && err.contains("unknown field \"spec.containers[0].imagee\""),
        "{err}"
    );

    let out = k.ok(&["get", "--raw", "/version"]).await;
    assert!(out.contains("\"minor\":\"37\""), "{out}");
    let out = k.ok(&["get", "priorityclasses"]).await;
    assert!(out.contains("system-node-critical"), "{out}");

    let out = k.ok(&["delete", "pod", "x"]).await;
    assert!(out.contains("pod \"x\" deleted"), "{out}");
    assert!(running.store().try_get("pods", Some("default"), "x").is_none());
    let (ok, _, err) = k.run(&["get", "pod", "x"]).await;
    assert!(!ok && err.contains("NotFound"), "{err}");

    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// kubectl's generators and `drain` send protobuf bodies (objects, `Eviction`, `DeleteOptions`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_generators_and_drain_send_protobuf() {
    let (running, k, dir) = serve(false, "pb").await;
    let store = running.store();

    let out = k.ok(&["create", "namespace", "team"]).await;
    assert!(out.contains("namespace/team created"), "{out}");
    assert_eq!(
        store.get("namespaces", None, "team").unwrap()["status"]["phase"],
        "Active"
    );
    k.ok(&[
        "create",
        "configmap",
        "cfg",
        "-n",
        "team",
        "--from-literal=a=1",
        "--from-literal=b=2",
    ])
    .await;
    let cm = store.get("configmaps", Some("team"), "cfg").unwrap();
    assert_eq!(cm["data"], serde_json::json!({"a": "1", "b": "2"}));
    k.ok(&[
        "create",
        "secret",
        "generic",
        "pw",
        "-n",
        "team",
        "--from-literal=p=hi",
    ])
    .await;
    assert_eq!(
        store.get("secrets", Some("team"), "pw").unwrap()["data"]["p"],
        "aGk="
    );
    let out = k.ok(&["create", "serviceaccount", "bot", "-n", "team"]).await;
    assert!(out.contains("serviceaccount/bot created"), "{out}");

    store
        .create(
            "nodes",
            None,
            serde_json::json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4", "pods": "10"}}}),
        )
        .unwrap();
    for name in ["a", "b"] {
        store
            .create(
                "pods",
                Some("team"),
                serde_json::json!({"metadata": {"name": name},
                    "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "x"}]}}),
            )
            .unwrap();
    }
    // A node written without conditions is defaulted to Ready, as a live kubelet would report.
    let out = k.ok(&["get", "nodes"]).await;
    assert!(
        out.lines()
            .any(|l| l.starts_with("n1 ") && l.split_whitespace().nth(1) == Some("Ready")),
        "{out}"
    );
    let (ok, out, err) = k
        .run(&["drain", "n1", "--force", "--ignore-daemonsets", "--timeout=20s"])
        .await;
    assert!(ok, "drain failed:\nstdout: {out}\nstderr: {err}");
    assert!(
        out.contains("pod/a evicted") && out.contains("pod/b evicted"),
        "{out}\n{err}"
    );
    assert!(store.try_get("pods", Some("team"), "a").is_none());
    assert!(store.try_get("pods", Some("team"), "b").is_none());
    assert_eq!(
        store.get("nodes", None, "n1").unwrap()["spec"]["unschedulable"],
        true
    );

    // Plain delete of a pod also carries protobuf DeleteOptions.
    store
        .create(
            "pods",
            Some("team"),
            serde_json::json!({"metadata": {"name": "c"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}),
        )
        .unwrap();
    let out = k
        .ok(&["delete", "pod", "c", "-n", "team", "--grace-period=0", "--force"])
        .await;
    assert!(out.contains("pod \"c\" force deleted"), "{out}");

    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `kubectl explain` reads the served OpenAPI v3 schemas, with upstream's field documentation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explain_prints_field_docs() {
    let (running, k, dir) = serve(false, "explain").await;
    let out = k.ok(&["explain", "pod.spec.containers"]).await;
    assert!(
        out.contains("FIELD: containers <[]Container>")
            && out.contains("List of containers belonging to the pod")
            && out.contains("image\t<string>"),
        "{out}"
    );
    let out = k.ok(&["explain", "resourceclaims.spec.devices"]).await;
    assert!(
        out.contains("GROUP:      resource.k8s.io")
            && out.contains("FIELD: devices <DeviceClaim>")
            && out.contains("requests\t<[]DeviceRequest>"),
        "{out}"
    );
    // The v2 document is JSON only: kubectl asks for protobuf and is told so (406), not fed
    // bytes it cannot parse.
    let (ok, _, err) = k.run(&["explain", "pod", "--output=plaintext-openapiv2"]).await;
    assert!(!ok && err.contains("NotAcceptable"), "{err}");
    let out = k.ok(&["get", "--raw", "/openapi/v2"]).await;
    let v2: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v2["swagger"], "2.0");
    assert!(v2["definitions"]["io.k8s.api.apps.v1.Deployment"].is_object());
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// `kubectl diff` (a dry-run patch) exits 0 for an unchanged object and 1 for a changed one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_diff_unchanged_is_0_changed_is_1() {
    let (running, k, dir) = serve(false, "diff").await;
    let pod = write(&dir, "pod.yaml", &POD.replace("IMAGE", "nginx:1"));
    // Created without kubectl's last-applied annotation: diff sends `annotations: {}`.
    k.ok(&["create", "-f", &pod]).await;
    let cm = write(
        &dir,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  a: \"1\"\n",
    );
    k.ok(&["apply", "-f", &cm]).await;
    let rv = running.store().resource_version();
    for file in [&pod, &cm] {
        let (ok, out, err) = k.run(&["diff", "-f", file]).await;
        assert!(
            ok && out.is_empty(),
            "diff of {file} should be empty:\n{out}\n{err}"
        );
        let (ok, out, err) = k.run(&["diff", "--server-side", "-f", file]).await;
        assert!(ok && out.is_empty(), "server-side diff of {file}:\n{out}\n{err}");
    }
    let changed = write(&dir, "pod2.yaml", &POD.replace("IMAGE", "nginx:2"));
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(&k.kubeconfig)
        .arg("--cache-dir")
        .arg(&k.cache);
    let out = cmd.args(["diff", "-f", &changed]).output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("-  - image: nginx:1") && text.contains("+  - image: nginx:2"),
        "{text}"
    );
    // Diffs are dry runs: nothing was written.
    assert_eq!(running.store().resource_version(), rv);
    assert_eq!(
        running.store().get("pods", Some("default"), "x").unwrap()["spec"]["containers"][0]["image"],
        "nginx:1"
    );
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// The scheduler's own manifests: a server-side dry run stores nothing, a real apply stores them
/// all, and discovery lists their kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_apply_deploy_manifests() {
    let (running, k, dir) = serve(false, "manifests").await;
    let manifests = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/manifests");
    let out = k.ok(&["api-resources", "--no-headers"]).await;
    for kind in [
        "Deployment",
        "Service",
        "ServiceAccount",
        "Role",
        "ClusterRole",
        "RoleBinding",
        "ClusterRoleBinding",
        "ConfigMap",
        "PodDisruptionBudget",
    ] {
        assert!(
            out.lines().any(|l| l.split_whitespace().any(|w| w == kind)),
            "{kind} missing from discovery:\n{out}"
        );
    }
    // As with kube-apiserver, a dry run cannot put objects into a namespace it only pretends to
    // create: the namespace must exist first.
    k.ok(&["create", "namespace", "unisched-system"]).await;
    let rv = running.store().resource_version();
    let out = k.ok(&["apply", "--dry-run=server", "-k", manifests]).await;
    assert!(
        out.contains("deployment.apps/unisched created (server dry run)")
            && out.contains("clusterrolebinding.rbac.authorization.k8s.io/unisched created (server dry run)"),
        "{out}"
    );
    assert_eq!(
        running.store().resource_version(),
        rv,
        "a dry run stored something"
    );
    assert!(
        running
            .store()
            .try_get("deployments", Some("unisched-system"), "unisched")
            .is_none()
    );

    let out = k.ok(&["apply", "-k", manifests]).await;
    assert!(out.contains("deployment.apps/unisched created"), "{out}");
    let store = running.store();
    for (resource, ns, name) in [
        ("deployments", Some("unisched-system"), "unisched"),
        ("services", Some("unisched-system"), "unisched"),
        ("serviceaccounts", Some("unisched-system"), "unisched"),
        ("clusterroles", None, "unisched"),
        ("clusterrolebindings", None, "unisched"),
        ("roles", Some("unisched-system"), "unisched-leader-election"),
        (
            "rolebindings",
            Some("unisched-system"),
            "unisched-leader-election",
        ),
    ] {
        assert!(
            store.try_get(resource, ns, name).is_some(),
            "{resource} {name} not stored"
        );
    }
    let out = k.ok(&["get", "deploy,svc", "-n", "unisched-system"]).await;
    assert!(
        out.contains("deployment.apps/unisched") && out.contains("service/unisched"),
        "{out}"
    );
    // Applying the same manifests again changes nothing. kubectl still reports the PDB as
    // "configured": its selector has the `replace` patch strategy, so kubectl always sends it, as
    // it does against kube-apiserver; the server finds nothing to change.
    let rv = store.resource_version();
    let out = k.ok(&["apply", "-k", manifests]).await;
    assert!(
        out.lines()
            .all(|l| l.ends_with(" unchanged") || l == "poddisruptionbudget.policy/unisched configured"),
        "{out}"
    );
    assert_eq!(store.resource_version(), rv, "a no-op apply wrote something");
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Pod created from a protobuf body through the HTTP API (as client-go sends when asked to).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_sees_a_pod_created_from_protobuf() {
    let (running, k, dir) = serve(false, "podpb").await;
    fn varint(mut v: usize, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn field(n: usize, b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(n << 3 | 2, &mut out);
        varint(b.len(), &mut out);
        out.extend_from_slice(b);
        out
    }
    let container = [field(1, b"c"), field(2, b"nginx:pb")].concat();
    let spec = [field(2, &container), field(19, b"unisched")].concat();
    let pod = [field(1, &field(1, b"pb")), field(2, &spec)].concat();
    let type_meta = [field(1, b"v1"), field(2, b"Pod")].concat();
    let body = [b"k8s\0".to_vec(), field(1, &type_meta), field(2, &pod)].concat();
    let client = kube::Client::try_from(kube::Config::new(running.url().parse().unwrap())).unwrap();
    let request = axum::http::Request::post("/api/v1/namespaces/default/pods")
        .header("Content-Type", "application/vnd.kubernetes.protobuf")
        .header("Accept", "application/json")
        .body(kube::client::Body::from(body))
        .unwrap();
    let response = client.send(request).await.unwrap();
    assert_eq!(response.status().as_u16(), 201);
    let out = k
        .ok(&[
            "get",
            "pod",
            "pb",
            "-o",
            "jsonpath={.spec.containers[0].image} {.spec.schedulerName}",
        ])
        .await;
    assert_eq!(out, "nginx:pb unisched");
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}

const JOB: &str = "apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  parallelism: 2
  completions: 4
  scheduling:
    schedulingPolicy:
      gang: {minCount: 2}
  template:
    spec:
      restartPolicy: RESTART
      containers:
      - {name: train, image: registry.example/train:1}
";

/// A Job through kubectl: kube-apiserver's wording for a bad one, the table of `get jobs`, the pods
/// and the PodGroup the Job controller makes, and `kubectl delete` taking the pods along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_runs_a_gang_job() {
    let (running, k, dir) = serve(true, "job").await;
    let bad = write(&dir, "bad.yaml", &JOB.replace("RESTART", "Always"));
    let (ok, _, err) = k.run(&["create", "-f", &bad]).await;
    assert!(
        !ok && err.contains(
            "The Job \"train\" is invalid: spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""
        ),
        "{err}"
    );
    let job = write(&dir, "job.yaml", &JOB.replace("RESTART", "Never"));
    let out = k.ok(&["apply", "-f", &job]).await;
    assert!(out.contains("job.batch/train created"), "{out}");
    let store = running.store();
    let pods = || {
        store
            .list_all("pods", Some("default"))
            .unwrap()
            .iter()
            .filter(|p| p["metadata"]["labels"]["job-name"] == "train")
            .count()
    };
    let start = std::time::Instant::now();
    while pods() < 2 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pods(), 2);
    let out = k.ok(&["get", "jobs"]).await;
    let header: Vec<&str> = out.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
        "{out}"
    );
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..3], ["train", "Running", "0/4"], "{out}");
    let out = k.ok(&["get", "job", "train", "-o", "wide"]).await;
    assert!(
        out.contains("SELECTOR") && out.contains("batch.kubernetes.io/controller-uid="),
        "{out}"
    );
    let out = k
        .ok(&[
            "get",
            "podgroups",
            "-o",
            "jsonpath={.items[0].spec.schedulingPolicy.gang.minCount}",
        ])
        .await;
    assert_eq!(out, "2");
    let out = k
        .ok(&[
            "get",
            "pods",
            "-l",
            "job-name=train",
            "-o",
            "jsonpath={.items[*].spec.schedulingGroup.podGroupName}",
        ])
        .await;
    assert!(out.contains("-train-pgt-0-"), "{out}");
    // kubectl asks for background propagation: the garbage collector deletes the pods.
    let out = k.ok(&["delete", "job", "train"]).await;
    assert!(out.contains("job.batch \"train\" deleted"), "{out}");
    let start = std::time::Instant::now();
    while pods() > 0 && start.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(pods(), 0);
    running.shutdown().await;
    let _ = std::fs::remove_dir_all(&dir);
}
