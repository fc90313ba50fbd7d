//! Trust that changes while serving, with real TLS handshakes: a rotated `--client-ca-file`, the
//! client CA and front-proxy settings of the ConfigMap `kube-system/extension-apiserver-authentication`
//! (read once, then watched, so a rotation there applies too; a flag wins over it), and HTTP/2 by
//! ALPN next to HTTP/1.1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    net::SocketAddr,
    path::Path,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    body::Body,
    extract::{Query, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::get,
};
use common::{Authority, ClientIdentity, TempDir, Trust, fake_api_server_with, get_path, temp_dir};
use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::ConfigMap;
use parking_lot::Mutex;
use rustls::{ClientConfig, RootCertStore};
use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject};
use serde_json::json;
use tokio::sync::broadcast;
use unisched_serving::{SecureServingOptions, tls};

const CONFIGMAP: &str = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication";
const CONFIGMAPS: &str = "/api/v1/namespaces/kube-system/configmaps";

/// The API server's side of the ConfigMap: get, list and watch (by name), counted.
struct ConfigMapServer {
    current: Mutex<ConfigMap>,
    updates: broadcast::Sender<ConfigMap>,
    gets: AtomicUsize,
    lists: AtomicUsize,
    watches: AtomicUsize,
    field_selectors: Mutex<Vec<String>>,
}

impl ConfigMapServer {
    fn new(data: &[(&str, &str)]) -> Arc<Self> {
        Arc::new(ConfigMapServer {
            current: Mutex::new(configmap(data, 1)),
            updates: broadcast::channel(16).0,
            gets: AtomicUsize::new(0),
            lists: AtomicUsize::new(0),
            watches: AtomicUsize::new(0),
            field_selectors: Mutex::new(Vec::new()),
        })
    }

    fn router(self: &Arc<Self>) -> Router {
        Router::new()
            .route(CONFIGMAP, get(get_configmap))
            .route(CONFIGMAPS, get(list_or_watch))
            .with_state(self.clone())
    }

    /// Replaces the data, as an update by the API server, and tells the watchers.
    fn update(&self, data: &[(&str, &str)]) {
        let mut current = self.current.lock();
        let version: u64 = current
            .metadata
            .resource_version
            .as_deref()
            .unwrap()
            .parse()
            .unwrap();
        *current = configmap(data, version + 1);
        let _ = self.updates.send(current.clone());
    }
}

fn configmap(data: &[(&str, &str)], version: u64) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {
            "name": "extension-apiserver-authentication",
            "namespace": "kube-system",
            "resourceVersion": version.to_string(),
        },
        "data": data.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<BTreeMap<_, _>>(),
    }))
    .unwrap()
}

async fn get_configmap(State(server): State<Arc<ConfigMapServer>>) -> Json<ConfigMap> {
    server.gets.fetch_add(1, Ordering::SeqCst);
    Json(server.current.lock().clone())
}

async fn list_or_watch(
    State(server): State<Arc<ConfigMapServer>>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Some(selector) = query.get("fieldSelector") {
        server.field_selectors.lock().push(selector.clone());
    }
    if query.get("watch").is_some_and(|w| w == "true" || w == "1") {
        let updates = server.updates.subscribe();
        server.watches.fetch_add(1, Ordering::SeqCst);
        let events = futures::stream::unfold(updates, |mut updates| async move {
            let configmap = updates.recv().await.ok()?;
            let line = format!("{}\n", json!({"type": "MODIFIED", "object": configmap}));
            Some((Ok::<_, Infallible>(line), updates))
        });
        return Body::from_stream(events).into_response();
    }
    server.lists.fetch_add(1, Ordering::SeqCst);
    let current = server.current.lock().clone();
    let version = current.metadata.resource_version.clone();
    (
        StatusCode::OK,
        Json(json!({
            "apiVersion": "v1", "kind": "ConfigMapList",
            "metadata": {"resourceVersion": version},
            "items": [current],
        })),
    )
        .into_response()
}

fn app() -> Router {
    Router::new()
        .route("/metrics", get(|| async { "scheduler_pending_pods 0\n" }))
        .route("/healthz", get(|| async { "ok" }))
}

/// A serving certificate written to `dir`, and how a client trusts it.
fn serving_files(dir: &Path) -> (SecureServingOptions, Trust) {
    let serving = tls::self_signed("").unwrap();
    std::fs::write(dir.join("tls.crt"), &serving.certificate).unwrap();
    std::fs::write(dir.join("tls.key"), &serving.key).unwrap();
    let options = SecureServingOptions {
        tls_cert_file: Some(dir.join("tls.crt")),
        tls_private_key_file: Some(dir.join("tls.key")),
        ..SecureServingOptions::default()
    };
    let trust = Trust::Certificate(CertificateDer::from_pem_slice(serving.certificate.as_bytes()).unwrap());
    (options, trust)
}

/// Serves `app()` with `options`, delegating to `client`.
async fn serve(options: SecureServingOptions, client: kube::Client) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = options
        .builder()
        .default_client(client)
        .listener(listener)
        .bind(app())
        .await
        .unwrap()
        .unwrap();
    let addr = server.local_addr().unwrap();
    server.spawn();
    addr
}

/// The status of `GET /metrics` with `identity`; `None` when the handshake refused it.
async fn metrics_status(addr: SocketAddr, trust: &Trust, identity: &ClientIdentity) -> Option<u16> {
    get_path(addr, trust, Some(identity), "/metrics", &[])
        .await
        .ok()
        .map(|(status, _)| status)
}

/// Polls `metrics_status` until it is `want` (rotations apply asynchronously), within 10 s.
async fn eventually(addr: SocketAddr, trust: &Trust, identity: &ClientIdentity, want: Option<u16>) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let got = metrics_status(addr, trust, identity).await;
        if got == want {
            return;
        }
        assert!(Instant::now() < until, "still {got:?}, wanted {want:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct ConfigMapFixture {
    addr: SocketAddr,
    trust: Trust,
    configmap: Arc<ConfigMapServer>,
    _dir: TempDir,
}

async fn configmap_fixture(
    name: &str,
    data: &[(&str, &str)],
    client_ca_file: Option<&Authority>,
) -> ConfigMapFixture {
    let dir = temp_dir(name);
    let (mut options, trust) = serving_files(&dir.0);
    options.client_ca_file = client_ca_file.map(|ca| ca.write(&dir.0, "client-ca.crt"));
    let configmap = ConfigMapServer::new(data);
    let (client, _) = fake_api_server_with(configmap.router()).await;
    let addr = serve(options, client).await;
    ConfigMapFixture {
        addr,
        trust,
        configmap,
        _dir: dir,
    }
}

#[tokio::test]
async fn without_the_flags_the_configmap_is_trusted_and_followed() {
    let client_ca = Authority::new("cluster-client-ca");
    let proxy_ca = Authority::new("cluster-front-proxy-ca");
    let (client_pem, proxy_pem) = (client_ca.issuer.pem(), proxy_ca.issuer.pem());
    let settings = [
        ("requestheader-allowed-names", r#"["front-proxy-client"]"#),
        ("requestheader-username-headers", r#"["X-Cluster-User"]"#),
        ("requestheader-group-headers", r#"["X-Cluster-Group"]"#),
        ("requestheader-extra-headers-prefix", r#"["X-Cluster-Extra-"]"#),
    ];
    let mut data = vec![
        ("client-ca-file", client_pem.as_str()),
        ("requestheader-client-ca-file", proxy_pem.as_str()),
    ];
    data.extend(settings);
    let f = configmap_fixture("configmap", &data, None).await;
    assert_eq!(
        f.configmap.gets.load(Ordering::SeqCst),
        1,
        "read once before serving"
    );

    // The ConfigMap's client CA authenticates; the metrics reader is allowed.
    let reader = client_ca.client("metrics-reader", &[]);
    assert_eq!(metrics_status(f.addr, &f.trust, &reader).await, Some(200));
    // The ConfigMap's front proxy, with the ConfigMap's header names (not the flags' defaults).
    let proxy = proxy_ca.client("front-proxy-client", &[]);
    let as_alice = [("X-Cluster-User", "alice")];
    let status = get_path(f.addr, &f.trust, Some(&proxy), "/metrics", &as_alice).await;
    assert_eq!(status.unwrap().0, 200);
    let default_header = [("X-Remote-User", "alice")];
    let status = get_path(f.addr, &f.trust, Some(&proxy), "/metrics", &default_header).await;
    assert_eq!(
        status.unwrap().0,
        401,
        "the flags' default header is not the ConfigMap's"
    );
    let other = proxy_ca.client("not-allowed", &[]);
    let status = get_path(f.addr, &f.trust, Some(&other), "/metrics", &as_alice).await;
    assert_eq!(status.unwrap().0, 401, "the ConfigMap's allowed names apply");

    // The API server rotates its client CA: the watch brings it to the next handshakes.
    let until = Instant::now() + Duration::from_secs(10);
    while f.configmap.watches.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < until, "the ConfigMap is never watched");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rotated = Authority::new("cluster-client-ca-rotated");
    let rotated_pem = rotated.issuer.pem();
    let mut data = vec![
        ("client-ca-file", rotated_pem.as_str()),
        ("requestheader-client-ca-file", proxy_pem.as_str()),
    ];
    data.extend(settings);
    f.configmap.update(&data);
    let renewed = rotated.client("metrics-reader", &[]);
    eventually(f.addr, &f.trust, &renewed, Some(200)).await;
    assert_eq!(
        metrics_status(f.addr, &f.trust, &reader).await,
        None,
        "the retired CA's certificates get no connection"
    );
    assert!(f.configmap.lists.load(Ordering::SeqCst) >= 1);
    let selectors = f.configmap.field_selectors.lock().clone();
    assert!(
        !selectors.is_empty()
            && selectors
                .iter()
                .all(|s| s == "metadata.name=extension-apiserver-authentication"),
        "list and watch only the one ConfigMap: {selectors:?}"
    );
}

#[tokio::test]
async fn the_client_ca_flag_wins_over_the_configmap() {
    let flag_ca = Authority::new("flag-client-ca");
    let cluster_ca = Authority::new("cluster-client-ca");
    let cluster_pem = cluster_ca.issuer.pem();
    let f = configmap_fixture(
        "configmap-flag",
        &[("client-ca-file", cluster_pem.as_str())],
        Some(&flag_ca),
    )
    .await;
    let from_flag = flag_ca.client("metrics-reader", &[]);
    assert_eq!(metrics_status(f.addr, &f.trust, &from_flag).await, Some(200));
    let from_cluster = cluster_ca.client("metrics-reader", &[]);
    assert_eq!(metrics_status(f.addr, &f.trust, &from_cluster).await, None);
}

#[tokio::test]
async fn a_rotated_client_ca_file_is_trusted_at_the_next_handshake() {
    let dir = temp_dir("client-ca-file-rotation");
    let (mut options, trust) = serving_files(&dir.0);
    let first = Authority::new("client-ca-1");
    let path = first.write(&dir.0, "client-ca.crt");
    options.client_ca_file = Some(path);
    // No ConfigMap routes: with the flag given, the client CA is never looked up there.
    let (client, _) = fake_api_server_with(Router::new()).await;
    let addr = serve(options, client).await;
    let old = first.client("metrics-reader", &[]);
    assert_eq!(metrics_status(addr, &trust, &old).await, Some(200));

    std::thread::sleep(Duration::from_millis(20));
    let second = Authority::new("client-ca-2");
    second.write(&dir.0, "client-ca.crt");
    let new = second.client("metrics-reader", &[]);
    assert_eq!(metrics_status(addr, &trust, &new).await, Some(200));
    assert_eq!(metrics_status(addr, &trust, &old).await, None);

    // A half-written file keeps the bundle it replaces.
    std::thread::sleep(Duration::from_millis(20));
    std::fs::write(dir.0.join("client-ca.crt"), "-----BEGIN CERTIFICATE-----\n").unwrap();
    assert_eq!(metrics_status(addr, &trust, &new).await, Some(200));
}

#[tokio::test]
async fn http2_is_offered_by_alpn_and_served() {
    let dir = temp_dir("h2");
    let (options, trust) = serving_files(&dir.0);
    let (client, _) = fake_api_server_with(Router::new()).await;
    let addr = serve(options, client).await;
    let Trust::Certificate(certificate) = &trust else {
        unreachable!()
    };
    let mut roots = RootCertStore::empty();
    roots.add(certificate.clone()).unwrap();
    let mut config = ClientConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(b"h2".as_slice()));
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    for path in ["/healthz", "/metrics"] {
        let request = http::Request::get(format!("https://localhost{path}"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.version(), http::Version::HTTP_2);
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        match path {
            "/healthz" => assert_eq!((status, body.as_ref()), (200, b"ok".as_slice())),
            // Anonymous over HTTP/2 is authorized like over HTTP/1.1.
            _ => assert_eq!(status, 403, "{body:?}"),
        }
    }
    // A client without ALPN gets HTTP/1.1, as before.
    assert_eq!(
        get_path(addr, &trust, None, "/healthz", &[]).await.unwrap().0,
        200
    );
}
