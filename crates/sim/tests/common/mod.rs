//! Shared helpers: start a server on a free loopback port and a kube-rs client for it.
#![allow(dead_code)]

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use unisched_sim::{ApiServer, ApiServerBuilder, RunningServer};

pub async fn start_with(builder: ApiServerBuilder) -> (RunningServer, Client) {
    let running = builder
        .build()
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let mut config = kube::Config::new(running.url().parse().unwrap());
    config.default_namespace = "default".into();
    config.read_timeout = Some(Duration::from_secs(30));
    let client = Client::try_from(config).unwrap();
    (running, client)
}

/// A kube-rs client for `running` that does not retry 429/503/504 answers (kube's default client
/// retries them with a backoff of up to minutes, which hides the answer a test wants to see).
pub fn client_without_retries(running: &RunningServer) -> Client {
    let mut config = kube::Config::new(running.url().parse().unwrap());
    config.default_namespace = "default".into();
    config.read_timeout = Some(Duration::from_secs(30));
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

/// A server without controllers.
pub async fn start() -> (RunningServer, Client) {
    start_with(ApiServer::builder().controllers(false)).await
}

pub fn pod_json(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    })
}

pub fn pod(name: &str) -> Pod {
    serde_json::from_value(pod_json(name)).unwrap()
}

pub fn pod_with_cpu(name: &str, cpu: &str) -> Pod {
    let mut p = pod_json(name);
    p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": cpu}});
    serde_json::from_value(p).unwrap()
}

pub fn node_json(name: &str, cpu: &str, pods: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "capacity": {"cpu": cpu, "memory": "8Gi", "pods": pods},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    })
}

/// Runs `f` until it returns Some or the timeout passes.
pub async fn eventually<T, F, Fut>(timeout: Duration, mut f: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Some(v);
        }
        if tokio::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One HTTP/1.1 exchange: status code, `Warning` header values, JSON body.
pub async fn http(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    ct: &str,
    body: &str,
) -> (u16, Vec<String>, Value) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let code: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let warnings = head
        .lines()
        .filter_map(|l| {
            l.strip_prefix("warning: ")
                .or_else(|| l.strip_prefix("Warning: "))
        })
        .map(str::to_string)
        .collect();
    // Bodies may be chunked; the JSON object is between the first '{' and the last '}'.
    let json = match (rest.find('{'), rest.rfind('}')) {
        (Some(a), Some(b)) => serde_json::from_str(&rest[a..=b]).unwrap_or(Value::Null),
        _ => Value::Null,
    };
    (code, warnings, json)
}
