//! kubectl (if on PATH) against the simulator: create, get, get -o yaml, apply, delete.
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

fn kubectl_present() -> bool {
    std::process::Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
        .is_ok_and(|o| o.status.success())
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
    if !kubectl_present() {
        println!("NOTE: kubectl is not on PATH; skipping the kubectl test");
        return;
    }
    let running = ApiServer::builder()
        .build()
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!(
        "unisched-sim-kubectl-{}-{}",
        std::process::id(),
        running.addr.port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let k = Kubectl {
        kubeconfig: PathBuf::from(write(&dir, "kubeconfig", &running.kubeconfig())),
        cache: dir.join("cache"),
    };
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
    if !kubectl_present() {
        println!("NOTE: kubectl is not on PATH; skipping the kubectl test");
        return;
    }
    let running = ApiServer::builder()
        .controllers(false)
        .build()
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let dir = std::env::temp_dir().join(format!(
        "unisched-sim-kubectl-pb-{}-{}",
        std::process::id(),
        running.addr.port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let k = Kubectl {
        kubeconfig: PathBuf::from(write(&dir, "kubeconfig", &running.kubeconfig())),
        cache: dir.join("cache"),
    };
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
