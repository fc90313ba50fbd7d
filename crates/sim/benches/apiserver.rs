//! Throughput of the simulated API server alone (no controllers), printed as plain figures.
//!
//! `cargo bench -p unisched-sim --bench apiserver` (set `UNISCHED_BENCH_N` to change the object count,
//! default 10 000, `UNISCHED_BENCH_WATCHERS` for the fan-out, default 100, and
//! `UNISCHED_BENCH_IN_PROCESS_ONLY` to stop after the in-process figures).
//!
//! - in-process: `Store::create` / `Store::bind` / `Store::patch_status` from one thread;
//! - HTTP: the same through kube-rs with 16 requests in flight;
//! - watch fan-out: N watchers, one HTTP connection each, receiving every event of N creates: raw
//!   (counting events on the socket: the server's capacity) and through kube-rs (which also decodes
//!   every Pod, on the same two cores).

#![allow(clippy::expect_used)] // Benchmark code: a failed setup should stop the run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::core::response::Status;
use serde_json::{Value, json};
use unisched_sim::{ApiServer, Patch, RunningServer};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "bench"}},
        "spec": {"schedulerName": "unisched", "containers": [{"name": "c", "image": "busybox",
                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]},
    })
}

fn rate(n: usize, d: Duration) -> String {
    format!(
        "{:>9.0}/s  ({n} in {:.3} s)",
        n as f64 / d.as_secs_f64(),
        d.as_secs_f64()
    )
}

async fn server() -> (RunningServer, kube::Client) {
    let running = ApiServer::builder()
        .controllers(false)
        .history(500_000)
        .build()
        .serve("127.0.0.1:0".parse().expect("address"))
        .await
        .expect("serve");
    let config = kube::Config::new(running.url().parse().expect("url"));
    let client = kube::Client::try_from(config).expect("client");
    (running, client)
}

fn in_process(n: usize) {
    let store = ApiServer::builder()
        .controllers(false)
        .history(500_000)
        .build()
        .store()
        .clone();
    let t = Instant::now();
    for i in 0..n {
        store
            .create("pods", Some("default"), pod(&format!("p{i}")))
            .expect("create");
    }
    println!("in-process create        {}", rate(n, t.elapsed()));
    let t = Instant::now();
    for i in 0..n {
        store
            .bind("default", &format!("p{i}"), "node-1", None)
            .expect("bind");
    }
    println!("in-process bind          {}", rate(n, t.elapsed()));
    let t = Instant::now();
    for i in 0..n {
        let p =
            Patch::Strategic(json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}));
        store
            .patch_status("pods", Some("default"), &format!("p{i}"), &p)
            .expect("patch");
    }
    println!("in-process status patch  {}", rate(n, t.elapsed()));
    let t = Instant::now();
    let list = store.list_all("pods", Some("default")).expect("list");
    let bytes: usize = list.iter().map(|p| p.json_bytes().len()).sum();
    println!(
        "in-process list+serialise {} objects, {} KiB in {:.1} ms",
        list.len(),
        bytes / 1024,
        t.elapsed().as_secs_f64() * 1e3
    );
}

async fn over_http(n: usize) {
    let (running, client) = server().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let in_flight = 16;
    let t = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let p: Pod = serde_json::from_value(pod(&format!("h{i}"))).expect("pod");
                pods.create(&PostParams::default(), &p).await.expect("create");
            }
        })
        .buffer_unordered(in_flight)
        .collect::<Vec<_>>()
        .await;
    println!("HTTP create ({in_flight} in flight) {}", rate(n, t.elapsed()));
    let t = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let name = format!("h{i}");
                let b = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                               "target": {"kind": "Node", "name": "node-1"}});
                let _: Status = pods
                    .create_subresource("binding", &name, &PostParams::default(), &b)
                    .await
                    .expect("bind");
            }
        })
        .buffer_unordered(in_flight)
        .collect::<Vec<_>>()
        .await;
    println!("HTTP bind   ({in_flight} in flight) {}", rate(n, t.elapsed()));
    let t = Instant::now();
    let mut pages = 0;
    let mut items = 0;
    let mut token: Option<String> = None;
    loop {
        let mut lp = kube::api::ListParams::default().limit(500);
        if let Some(c) = &token {
            lp = lp.continue_token(c);
        }
        let page = pods.list(&lp).await.expect("list");
        pages += 1;
        items += page.items.len();
        token = page.metadata.continue_.clone();
        if token.is_none() {
            break;
        }
    }
    println!(
        "HTTP paginated list       {items} pods in {pages} pages, {:.1} ms",
        t.elapsed().as_secs_f64() * 1e3
    );
    running.shutdown().await;
}

async fn fan_out(n: usize, watchers: usize) {
    let (running, client) = server().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let rv = running.store().resource_version().to_string();
    let received = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let pods = pods.clone();
        let rv = rv.clone();
        let received = received.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = pods
                .watch(&WatchParams::default().timeout(290), &rv)
                .await
                .expect("watch")
                .boxed();
            let mut got = 0;
            while got < n {
                match s.try_next().await.expect("event") {
                    Some(WatchEvent::Added(_)) => {
                        got += 1;
                        received.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(_) => {}
                    None => break,
                }
            }
            got
        }));
    }
    // Let every watch connect.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let store = running.store().clone();
    let t = Instant::now();
    let writer = tokio::task::spawn_blocking(move || {
        for i in 0..n {
            store
                .create("pods", Some("default"), pod(&format!("f{i}")))
                .expect("create");
        }
    });
    writer.await.expect("writer");
    let write_time = t.elapsed();
    let mut complete = 0;
    for t in tasks {
        if t.await.expect("watcher") == n {
            complete += 1;
        }
    }
    let total = t.elapsed();
    println!(
        "watch fan-out: {watchers} watchers x {n} events = {} deliveries in {:.3} s ({:.0} events/s delivered; writes took {:.3} s; {complete}/{watchers} complete)",
        received.load(Ordering::Relaxed),
        total.as_secs_f64(),
        received.load(Ordering::Relaxed) as f64 / total.as_secs_f64(),
        write_time.as_secs_f64(),
    );
    running.shutdown().await;
}

/// Watchers that only count events on the raw HTTP stream: the server's fan-out capacity without the
/// cost of decoding objects in the client.
async fn fan_out_raw(n: usize, watchers: usize) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (running, _client) = server().await;
    let rv = running.store().resource_version();
    let addr = running.addr;
    let received = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let received = received.clone();
        tasks.push(tokio::spawn(async move {
            let mut sock = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let req = format!(
                "GET /api/v1/namespaces/default/pods?watch=true&resourceVersion={rv}&timeoutSeconds=290 HTTP/1.1\r\nHost: {addr}\r\n\r\n"
            );
            sock.write_all(req.as_bytes()).await.expect("request");
            let mut buf = vec![0u8; 256 * 1024];
            let mut got = 0;
            let mut last = 0u8;
            while got < n {
                let k = sock.read(&mut buf).await.expect("read");
                if k == 0 {
                    break;
                }
                for &b in &buf[..k] {
                    if b == b'\n' && last == b'}' {
                        got += 1;
                    }
                    last = b;
                }
            }
            received.fetch_add(got, Ordering::Relaxed);
            got
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let store = running.store().clone();
    let t = Instant::now();
    let writer = tokio::task::spawn_blocking(move || {
        for i in 0..n {
            store
                .create("pods", Some("default"), pod(&format!("r{i}")))
                .expect("create");
        }
    });
    writer.await.expect("writer");
    let write_time = t.elapsed();
    let mut complete = 0;
    for t in tasks {
        if t.await.expect("watcher") == n {
            complete += 1;
        }
    }
    let total = t.elapsed();
    println!(
        "raw watch fan-out: {watchers} watchers x {n} events = {} deliveries in {:.3} s ({:.0} events/s delivered; writes took {:.3} s; {complete}/{watchers} complete)",
        received.load(Ordering::Relaxed),
        total.as_secs_f64(),
        received.load(Ordering::Relaxed) as f64 / total.as_secs_f64(),
        write_time.as_secs_f64(),
    );
    running.shutdown().await;
}

/// Write-to-watcher latency: one in-process create, then wait for its event on an HTTP watch.
async fn watch_latency(n: usize) {
    let (running, client) = server().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    let rv = running.store().resource_version().to_string();
    let mut s = pods
        .watch(&WatchParams::default().timeout(290), &rv)
        .await
        .expect("watch")
        .boxed();
    let store = running.store().clone();
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        store
            .create("pods", Some("default"), pod(&format!("l{i}")))
            .expect("create");
        loop {
            if let Some(WatchEvent::Added(_)) = s.try_next().await.expect("event") {
                break;
            }
        }
        lat.push(t.elapsed());
    }
    lat.sort();
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize].as_secs_f64() * 1e6;
    println!(
        "write→watch latency       p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs ({n} writes)",
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
    running.shutdown().await;
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        // `cargo test --benches` and friends.
        return;
    }
    let n = env("UNISCHED_BENCH_N", 10_000);
    let watchers = env("UNISCHED_BENCH_WATCHERS", 100);
    println!(
        "unisched-sim API server benchmark (N = {n}, {} cores)",
        std::thread::available_parallelism().map_or(0, |p| p.get())
    );
    in_process(n);
    if std::env::var("UNISCHED_BENCH_IN_PROCESS_ONLY").is_ok() {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(over_http(n));
    rt.block_on(watch_latency(n.min(2000)));
    rt.block_on(fan_out_raw(n, watchers));
    rt.block_on(fan_out(n, watchers));
}
