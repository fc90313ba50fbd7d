//! What one API write and one watch event cost this process in CPU, against a real API server.
//!
//! ```sh
//! e2e/upstream/control-plane start /tmp/cp
//! cargo run --release -p unisched-runtime --example request_cost -- \
//!     /tmp/cp/admin.kubeconfig [REQUESTS=2000] [CONCURRENCY=32] [TRANSPORT=kube-h1]
//! ```
//!
//! Why: on the real control plane the scheduler's CPU per pod is mostly its share of the API
//! traffic each pod brings: its binding, its `Scheduled` event and the watch events of its creation
//! and binding; for a preemption victim, its `DisruptionTarget` status patch, its deletion, its
//! `Preempted` event and their watch events. Those requests are what upstream's scheduler sends
//! too, so what each costs is a floor under the per-pod figures that no scheduling work can go
//! below. This measures each kind alone: `REQUESTS` of it, `CONCURRENCY` in flight, the replies
//! metadata-only as `unisched run` asks for them, and a pod watch counting what comes back.
//!
//! Writes run on one single-worker runtime and the watch on another; each runtime's threads are
//! timed from `/proc/self/task/*/schedstat` (nanoseconds on CPU), so the two figures do not mix.
//! On loopback the kernel's receive path of each segment runs in the sender's context, so a
//! request's figure includes some of the API server's receiving, as it does for any scheduler.
//!
//! `TRANSPORT` says how the writes go out, to tell the client stack's share from the rest:
//! `kube-h1` is the client `unisched run` has (kube's stack over HTTP/1.1); `kube-h2` kube's
//! client over an HTTP/2 connection; `hyper-h1` and `hyper-h2` hyper's client with nothing but
//! authentication on top (no request buffer task, tracing or retry layers).

use std::{
    error::Error,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use futures::{StreamExt, stream};
use http_body_util::{BodyExt as _, Full};
use k8s_openapi::api::core::v1::{Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, Patch, PostParams, WatchEvent, WatchParams};
use kube::client::ConfigExt as _;
use serde_json::json;
use tower::{BoxError, ServiceExt as _, util::BoxCloneSyncService};
use unisched_runtime::{Lean, METADATA_ONLY, instrumented_client};

const NAMESPACE: &str = "default";
const NODE: &str = "request-cost-node";
const LABEL: &str = "request-cost=true";

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: request_cost KUBECONFIG [REQUESTS] [CONCURRENCY] [kube-h1|kube-h2|hyper-h1|hyper-h2]";
    let kubeconfig = args.get(1).ok_or(usage)?;
    let requests: usize = args.get(2).map_or(Ok(2000), |s| s.parse())?;
    let concurrency: usize = args.get(3).map_or(Ok(32), |s| s.parse())?;
    let transport = args.get(4).map_or("kube-h1", String::as_str);

    let writes = runtime("rc-writes")?;
    let watches = runtime("rc-watch")?;
    let config = writes.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
        kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await
    })?;
    let sender = writes.block_on(async { Sender::new(transport, config.clone()) })?;
    let admin = writes.block_on(async { instrumented_client(config.clone()) })?;
    let watch_client = watches.block_on(async { instrumented_client(config) })?;

    let seen = Arc::new(AtomicU64::new(0));
    let pods: Api<Lean<Pod>> = Api::namespaced(watch_client, NAMESPACE);
    let counter = seen.clone();
    watches.spawn(async move {
        let params = WatchParams::default().labels(LABEL).timeout(290);
        let mut events = match pods.watch(&params, "0").await {
            Ok(s) => s.boxed(),
            Err(e) => return eprintln!("watch: {e}"),
        };
        while let Some(event) = events.next().await {
            match event {
                Ok(WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_)) => {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                Ok(_) => {}
                Err(e) => eprintln!("watch: {e}"),
            }
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    let node: Node = serde_json::from_value(json!({"metadata": {"name": NODE},
        "status": {"allocatable": {"cpu": "1000", "memory": "1000Gi", "pods": "100000"}}}))?;
    writes.block_on(async {
        let created = Api::<Node>::all(admin.clone())
            .create(&PostParams::default(), &node)
            .await;
        match created {
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            other => other.map(drop),
        }
    })?;

    let measure = Measure {
        writes: &writes,
        sender: &sender,
        seen: &seen,
        requests,
        concurrency,
    };
    let pods = || kube::core::Request::new(format!("/api/v1/namespaces/{NAMESPACE}/pods"));
    let rows = [
        measure.phase("pod create", 1, &|i| {
            Ok(pods().create(&PostParams::default(), serde_json::to_vec(&pod(i))?)?)
        })?,
        measure.phase("pods/binding", 1, &|i| {
            let binding = json!({"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": pod_name(i), "namespace": NAMESPACE},
                "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}});
            let body = serde_json::to_vec(&binding)?;
            Ok(pods().create_subresource("binding", &pod_name(i), &PostParams::default(), body)?)
        })?,
        measure.phase("events.k8s.io/v1 Event create", 0, &|i| {
            let events =
                kube::core::Request::new(format!("/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events"));
            Ok(events.create(&PostParams::default(), serde_json::to_vec(&event(i))?)?)
        })?,
        measure.phase("pods/status patch (DisruptionTarget)", 1, &|i| {
            let patch = Patch::Strategic(json!({"status": {"conditions": [{"type": "DisruptionTarget",
                "status": "True", "reason": "PreemptionByScheduler", "message": "request_cost"}]}}));
            Ok(pods().patch_subresource("status", &pod_name(i), &Default::default(), &patch)?)
        })?,
        measure.phase("pod delete, grace period 0", 2, &|i| {
            Ok(pods().delete(&pod_name(i), &DeleteParams::default().grace_period(0))?)
        })?,
    ];
    writes.block_on(async {
        let _ = Api::<Node>::all(admin.clone())
            .delete(NODE, &DeleteParams::default())
            .await;
        let events: Api<Event> = Api::namespaced(admin.clone(), NAMESPACE);
        let _ = events
            .delete_collection(&DeleteParams::default(), &Default::default())
            .await;
    });

    println!("transport {transport}, {requests} requests of each kind, {concurrency} in flight\n");
    println!("| request | writer CPU µs per request | watch CPU µs per event | watch events per request |");
    println!("|---|---|---|---|");
    for row in rows {
        println!(
            "| {} | {:.1} | {} | {:.2} |",
            row.name,
            row.write_us,
            row.watch_us
                .map_or_else(|| "–".to_string(), |us| format!("{us:.1}")),
            row.events_per_request
        );
    }
    Ok(())
}

fn runtime(name: &str) -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(name)
        .enable_all()
        .build()
}

/// CPU nanoseconds of every thread of this process whose name starts with `prefix`.
fn threads_cpu(prefix: &str) -> u64 {
    let tasks = std::fs::read_dir("/proc/self/task")
        .into_iter()
        .flatten()
        .flatten();
    tasks
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|comm| comm.trim_end().starts_with(prefix))
        })
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

fn pod_name(i: usize) -> String {
    format!("request-cost-{i}")
}

/// A pod as scheduler_perf's default template makes them: one container with requests.
fn pod(i: usize) -> Pod {
    let spec = json!({
        "metadata": {"name": pod_name(i), "namespace": NAMESPACE, "labels": {"request-cost": "true"}},
        "spec": {"schedulerName": "nobody", "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "10m", "memory": "10Mi"}}}]}
    });
    serde_json::from_value(spec).unwrap_or_default()
}

/// A `Scheduled` event as the scheduler writes one.
fn event(i: usize) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{}.{:x}", pod_name(i), i.wrapping_mul(7919))),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        },
        event_time: Some(MicroTime(jiff::Timestamp::now())),
        reporting_controller: Some("default-scheduler".into()),
        reporting_instance: Some("default-scheduler-request-cost".into()),
        action: Some("Binding".into()),
        reason: Some("Scheduled".into()),
        note: Some(format!(
            "Successfully assigned {NAMESPACE}/{} to {NODE}",
            pod_name(i)
        )),
        type_: Some("Normal".into()),
        regarding: Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some(NAMESPACE.into()),
            name: Some(pod_name(i)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

struct Measure<'a> {
    writes: &'a tokio::runtime::Runtime,
    sender: &'a Sender,
    seen: &'a AtomicU64,
    requests: usize,
    concurrency: usize,
}

struct Row {
    name: &'static str,
    write_us: f64,
    watch_us: Option<f64>,
    events_per_request: f64,
}

type BuildRequest<'a> =
    dyn Fn(usize) -> std::result::Result<http::Request<Vec<u8>>, Box<dyn Error + Send + Sync>> + 'a;

impl Measure<'_> {
    /// Sends `self.requests` requests made by `build`, waits for `events_per_request` watch events
    /// of each (a minute at most), and times both runtimes' threads over it.
    fn phase(&self, name: &'static str, events_per_request: u64, build: &BuildRequest<'_>) -> Result<Row> {
        let (writes_before, watch_before) = (threads_cpu("rc-writes"), threads_cpu("rc-watch"));
        let seen_before = self.seen.load(Ordering::SeqCst);
        let started = Instant::now();
        let requests = (0..self.requests)
            .map(|i| {
                let mut request = build(i)?;
                request.headers_mut().insert(
                    http::header::ACCEPT,
                    http::HeaderValue::from_static(METADATA_ONLY),
                );
                Ok(request)
            })
            .collect::<Result<Vec<_>>>()?;
        let results: Vec<Result<()>> = self.writes.block_on(
            stream::iter(requests)
                .map(|r| self.sender.send(r))
                .buffer_unordered(self.concurrency)
                .collect(),
        );
        results.into_iter().collect::<Result<Vec<()>>>()?;
        let expected = seen_before + events_per_request * self.requests as u64;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.seen.load(Ordering::SeqCst) < expected && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        // Events beyond the expected ones (a second update) still count.
        std::thread::sleep(Duration::from_millis(300));
        let events = self.seen.load(Ordering::SeqCst) - seen_before;
        let write_ns = threads_cpu("rc-writes") - writes_before;
        let watch_ns = threads_cpu("rc-watch") - watch_before;
        eprintln!(
            "{name}: {} requests in {:.1} s, {events} watch events",
            self.requests,
            started.elapsed().as_secs_f64()
        );
        Ok(Row {
            name,
            write_us: write_ns as f64 / 1e3 / self.requests as f64,
            watch_us: (events > 0).then(|| watch_ns as f64 / 1e3 / events as f64),
            events_per_request: events as f64 / self.requests as f64,
        })
    }
}

/// How the measured writes go out.
#[derive(Clone)]
enum Sender {
    Kube(kube::Client),
    Hyper(
        BoxCloneSyncService<
            http::Request<Full<bytes::Bytes>>,
            http::Response<hyper::body::Incoming>,
            BoxError,
        >,
        String,
    ),
}

/// The part of a metadata-only reply that is kept; decoded through [`Lean`] (without
/// `managedFields`), as `unisched run` decodes it.
#[derive(serde::Deserialize)]
struct Reply {
    #[serde(default)]
    metadata: ObjectMeta,
}

impl Sender {
    fn new(transport: &str, config: kube::Config) -> Result<Sender> {
        if transport == "kube-h1" {
            return Ok(Sender::Kube(instrumented_client(config)?));
        }
        let h2 = match transport {
            "kube-h2" | "hyper-h2" => true,
            "hyper-h1" => false,
            other => return Err(format!("unknown transport {other:?}").into()),
        };
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.enforce_http(false);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(config.rustls_client_config()?)
            .https_or_http();
        let https = if h2 {
            https.enable_http2().wrap_connector(http)
        } else {
            https.enable_http1().wrap_connector(http)
        };
        let mut builder = hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new());
        builder.http2_only(h2);
        if transport == "kube-h2" {
            let service = tower::ServiceBuilder::new()
                .layer(config.base_uri_layer())
                .option_layer(config.auth_layer()?)
                .map_err(BoxError::from)
                .service(builder.build::<_, kube::client::Body>(https));
            return Ok(Sender::Kube(
                kube::client::ClientBuilder::new(service, NAMESPACE).build(),
            ));
        }
        let service = tower::ServiceBuilder::new()
            .option_layer(config.auth_layer()?)
            .map_err(BoxError::from)
            .service(builder.build::<_, Full<bytes::Bytes>>(https));
        let base = config.cluster_url.to_string().trim_end_matches('/').to_string();
        Ok(Sender::Hyper(BoxCloneSyncService::new(service), base))
    }

    async fn send(&self, request: http::Request<Vec<u8>>) -> Result<()> {
        let reply: Lean<Reply> = match self {
            Sender::Kube(client) => client.request(request).await?,
            Sender::Hyper(service, base) => {
                let (mut parts, body) = request.into_parts();
                parts.uri = format!("{base}{}", parts.uri).parse()?;
                let request = http::Request::from_parts(parts, Full::new(bytes::Bytes::from(body)));
                let response = service.clone().oneshot(request).await?;
                let status = response.status();
                let body = response.into_body().collect().await?.to_bytes();
                if !status.is_success() {
                    return Err(format!("{status}: {}", String::from_utf8_lossy(&body)).into());
                }
                serde_json::from_slice(&body)?
            }
        };
        drop(reply.0.metadata);
        Ok(())
    }
}
