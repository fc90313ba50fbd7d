//! Scheduler extenders end to end: `unisched sim` with a configuration whose `extenders` point
//! at HTTP servers this test starts. One filter-and-prioritize extender rejects `node-a` and
//! prefers `node-c` (which the plugins alone would not choose); a binder binds the pods that
//! request its resource through the embedded API server; slow and failing extenders, ignorable
//! or not, show upstream's failure handling: an ignorable one is skipped and its pods still
//! scheduled, another one fails the attempt (`SchedulerError`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use axum::{Json, Router, extract::State, routing::post};
use common::{free_port, sim_json, tempdir};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the extenders saw.
#[derive(Default)]
struct Seen {
    filter_calls: AtomicUsize,
    prioritize_calls: AtomicUsize,
    /// Pod name → node, for each binding the binder made.
    bound: Mutex<BTreeMap<String, String>>,
    /// The binder's API server port.
    api_port: u16,
}

/// Serves `router` on a runtime of its own.
fn serve(router: Router) -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            axum::serve(listener, router).await.unwrap();
        });
    });
    rx.recv().unwrap()
}

fn names(args: &Value) -> Vec<String> {
    args["Nodes"]["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

async fn filter(State(seen): State<Arc<Seen>>, Json(args): Json<Value>) -> Json<Value> {
    seen.filter_calls.fetch_add(1, Ordering::SeqCst);
    let all = names(&args);
    let kept: Vec<Value> = args["Nodes"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["metadata"]["name"] != "node-a")
        .cloned()
        .collect();
    let failed: BTreeMap<String, String> = all
        .iter()
        .filter(|n| *n == "node-a")
        .map(|n| (n.clone(), "node-a is reserved by the extender".to_string()))
        .collect();
    Json(json!({"Nodes": {"items": kept}, "FailedNodes": failed}))
}

async fn prioritize(State(seen): State<Arc<Seen>>, Json(args): Json<Value>) -> Json<Value> {
    seen.prioritize_calls.fetch_add(1, Ordering::SeqCst);
    let scores: Vec<Value> = names(&args)
        .into_iter()
        .map(|n| json!({"Host": n, "Score": if n == "node-c" { 10 } else { 0 }}))
        .collect();
    Json(json!(scores))
}

/// Binds through the embedded API server, as a real binder extender would.
async fn bind(State(seen): State<Arc<Seen>>, Json(args): Json<Value>) -> Json<Value> {
    let (name, namespace, node) = (
        args["PodName"].as_str().unwrap().to_string(),
        args["PodNamespace"].as_str().unwrap().to_string(),
        args["Node"].as_str().unwrap().to_string(),
    );
    let body = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": args["PodUID"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    })
    .to_string();
    let path = format!("/api/v1/namespaces/{namespace}/pods/{name}/binding");
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", seen.api_port))
        .await
        .unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    if !answer.starts_with("HTTP/1.1 201") && !answer.starts_with("HTTP/1.1 200") {
        return Json(json!({"Error": format!("binding refused: {}", answer.lines().next().unwrap_or(""))}));
    }
    seen.bound.lock().insert(name, node);
    Json(json!({"Error": ""}))
}

/// Keeps every node, after longer than the extenders' `httpTimeout`.
async fn slow_filter(Json(args): Json<Value>) -> Json<Value> {
    tokio::time::sleep(Duration::from_secs(3)).await;
    Json(json!({"Nodes": args["Nodes"]}))
}

/// Always fails.
async fn broken() -> (axum::http::StatusCode, &'static str) {
    (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "broken")
}

/// A node with 8 CPUs, 16Gi and one of each extender's resources.
fn node(name: &str) -> String {
    let extra: String = EXTENDED.iter().map(|r| format!(", \"{r}\": \"1\"")).collect();
    format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\nstatus:\n  allocatable: {{cpu: \"8\", memory: 16Gi, pods: \"110\"{extra}}}\n  capacity: {{cpu: \"8\", memory: 16Gi, pods: \"110\"{extra}}}\n"
    )
}

/// The resources the extenders manage, one each.
const EXTENDED: [&str; 5] = [
    "example.com/bind",
    "example.com/slow-ok",
    "example.com/slow",
    "example.com/flaky",
    "example.com/broken",
];

fn pod(name: &str, resource: Option<&str>) -> String {
    let limits = resource.map_or(String::new(), |r| format!(", limits: {{\"{r}\": \"1\"}}"));
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  schedulerName: unisched\n  containers: [{{name: c, image: registry.example/app:1, resources: {{requests: {{cpu: 100m}}{limits}}}}}]\n"
    )
}

#[test]
fn extenders_filter_prioritize_bind_and_fail_as_upstream() {
    let api_port = free_port();
    let seen = Arc::new(Seen {
        api_port,
        ..Seen::default()
    });
    let addr = serve(
        Router::new()
            .route("/main/filter", post(filter))
            .route("/main/prioritize", post(prioritize))
            .route("/binder/bind", post(bind))
            .route("/slow/filter", post(slow_filter))
            .route("/broken/filter", post(broken))
            .with_state(seen.clone()),
    );
    let dir = tempdir("extenders");
    // node-c already runs a pod: the plugins alone prefer the emptier node-b.
    // The nodes have the extenders' resources (the fake kubelet admits pods by them); the
    // scheduler leaves them to the extenders (`ignoredByScheduler`).
    let cluster = [
        node("node-a"),
        node("node-b"),
        node("node-c"),
        "apiVersion: v1\nkind: Pod\nmetadata: {name: busy, namespace: default}\nspec:\n  nodeName: node-c\n  containers: [{name: c, image: registry.example/app:1, resources: {requests: {cpu: \"6\", memory: 12Gi}}}]\n".to_string(),
    ]
    .join("---\n");
    let steps = dir.join("scenario");
    std::fs::create_dir_all(steps.join("01-cluster")).unwrap();
    std::fs::create_dir_all(steps.join("02-pods")).unwrap();
    std::fs::write(steps.join("01-cluster/cluster.yaml"), cluster).unwrap();
    let pods = [
        pod("plain", None),
        pod("bound-by-extender", Some("example.com/bind")),
        pod("slow-ignorable", Some("example.com/slow-ok")),
        pod("slow-required", Some("example.com/slow")),
        pod("broken-ignorable", Some("example.com/flaky")),
        pod("broken-required", Some("example.com/broken")),
    ]
    .join("---\n");
    std::fs::write(steps.join("02-pods/pods.yaml"), pods).unwrap();
    let managed = |name: &str| format!("managedResources: [{{name: {name}, ignoredByScheduler: true}}]");
    let config = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nextenders:\n\
         - {{urlPrefix: \"http://{addr}/main\", filterVerb: filter, prioritizeVerb: prioritize, weight: 5}}\n\
         - {{urlPrefix: \"http://{addr}/binder\", bindVerb: bind, {}}}\n\
         - {{urlPrefix: \"http://{addr}/slow\", filterVerb: filter, httpTimeout: 500ms, ignorable: true, {}}}\n\
         - {{urlPrefix: \"http://{addr}/slow\", filterVerb: filter, httpTimeout: 500ms, {}}}\n\
         - {{urlPrefix: \"http://{addr}/broken\", filterVerb: filter, ignorable: true, {}}}\n\
         - {{urlPrefix: \"http://{addr}/broken\", filterVerb: filter, {}}}\n",
        managed("example.com/bind"),
        managed("example.com/slow-ok"),
        managed("example.com/slow"),
        managed("example.com/flaky"),
        managed("example.com/broken"),
    );
    let config_path = dir.join("scheduler.yaml");
    std::fs::write(&config_path, config).unwrap();
    let port = api_port.to_string();
    let (report, code) = sim_json(
        &[&steps],
        &[
            "--scheduler-config",
            config_path.to_str().unwrap(),
            "--port",
            &port,
            "--timeout",
            "30",
        ],
    );
    // The pods the required extenders fail stay in backoff, to be retried as upstream retries
    // errors; after their third error in a row (about 5 s: two backoffs and three 500 ms
    // timeouts) the run counts them as decided (exit code 0) with the error as their reason.
    // The timeout is only a bound for a loaded machine.
    assert_eq!(code, 0, "{report}");
    let pods: BTreeMap<String, &Value> = report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_string(), p))
        .collect();
    let node = |name: &str| pods[name]["node"].as_str().map(str::to_string);

    // The filter rejected node-a, the prioritizer's weight made node-c win over the emptier node-b.
    assert_eq!(node("plain").as_deref(), Some("node-c"), "{report}");
    assert!(seen.filter_calls.load(Ordering::SeqCst) > 0);
    assert!(seen.prioritize_calls.load(Ordering::SeqCst) > 0);
    // The binder bound its pod.
    assert_eq!(node("bound-by-extender").as_deref(), Some("node-c"), "{report}");
    assert_eq!(
        seen.bound.lock().get("bound-by-extender").map(String::as_str),
        Some("node-c")
    );
    assert_eq!(
        seen.bound.lock().len(),
        1,
        "only the pod with the binder's resource"
    );
    for name in ["plain", "bound-by-extender"] {
        assert_eq!(pods[name]["phase"], "Running", "{report}");
    }
    // Ignorable extenders that time out or fail are skipped.
    assert_eq!(node("slow-ignorable").as_deref(), Some("node-c"), "{report}");
    assert_eq!(node("broken-ignorable").as_deref(), Some("node-c"), "{report}");
    // Required ones fail the attempt: an error, not a rejection.
    for (name, text) in [
        ("slow-required", "Client.Timeout exceeded"),
        ("broken-required", "code 500"),
    ] {
        assert_eq!(node(name), None, "{report}");
        assert_eq!(pods[name]["reason"], "SchedulerError", "{report}");
        let message = pods[name]["message"].as_str().unwrap_or_default();
        assert!(message.contains(text), "{name}: {message}");
    }
}
