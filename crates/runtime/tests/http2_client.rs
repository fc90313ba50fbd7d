//! The API client speaks HTTP/2 to a TLS server that offers it, and once it has a connection its
//! requests in flight share it; a server offering only HTTP/1.1 still gets answers. (Requests sent
//! before any connection is up each open one: the protocol is known only after the handshake.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use http_body_util::Full;
use hyper::{Request, Response, body::Incoming};
use parking_lot::Mutex;
use tokio::net::TcpListener;

/// What the server saw.
#[derive(Default)]
struct Seen {
    connections: AtomicUsize,
    alpn: Mutex<Vec<Option<Vec<u8>>>>,
    versions: Mutex<Vec<http::Version>>,
}

const VERSION_JSON: &str = r#"{"major":"1","minor":"37","gitVersion":"v1.37.2","gitCommit":"","gitTreeState":"clean","buildDate":"1970-01-01T00:00:00Z","goVersion":"go","compiler":"gc","platform":"linux/amd64"}"#;

/// Serves `/version` over TLS for `localhost`, offering the ALPN protocols `alpn`; returns the
/// URL, the CA certificate (DER) and what the server sees.
async fn serve(alpn: &[&[u8]]) -> (String, Vec<u8>, Arc<Seen>) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let cert_der = certified.cert.der().to_vec();
    let key = rustls_pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert_der.clone().into()], key)
        .unwrap();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("https://localhost:{}", listener.local_addr().unwrap().port());
    let seen = Arc::new(Seen::default());
    let seen_by_server = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let acceptor = acceptor.clone();
            let seen = seen_by_server.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                seen.connections.fetch_add(1, Ordering::SeqCst);
                let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
                let h2 = alpn.as_deref() == Some(b"h2");
                seen.alpn.lock().push(alpn);
                let seen_in_service = seen.clone();
                let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                    seen_in_service.versions.lock().push(req.version());
                    async move {
                        // Long enough that two requests sent together are both in flight.
                        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                        Ok::<_, std::convert::Infallible>(
                            Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(bytes_of(VERSION_JSON)))
                                .unwrap(),
                        )
                    }
                });
                let io = hyper_util::rt::TokioIo::new(tls);
                if h2 {
                    let _ = hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(io, service)
                        .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
            });
        }
    });
    (url, cert_der, seen)
}

fn bytes_of(s: &str) -> hyper::body::Bytes {
    hyper::body::Bytes::copy_from_slice(s.as_bytes())
}

fn client_for(url: &str, ca: Vec<u8>) -> kube::Client {
    let mut config = kube::Config::new(url.parse().unwrap());
    config.root_cert = Some(vec![ca]);
    unisched_runtime::instrumented_client(config).unwrap()
}

/// One request, so a connection is up, then three at once.
async fn three_at_once_after_one(
    client: &kube::Client,
) -> (
    k8s_openapi::apimachinery::pkg::version::Info,
    k8s_openapi::apimachinery::pkg::version::Info,
    k8s_openapi::apimachinery::pkg::version::Info,
) {
    client.apiserver_version().await.unwrap();
    let (a, b, c) = tokio::join!(
        client.apiserver_version(),
        client.apiserver_version(),
        client.apiserver_version()
    );
    (a.unwrap(), b.unwrap(), c.unwrap())
}

#[tokio::test]
async fn requests_in_flight_share_one_http2_connection() {
    let (url, ca, seen) = serve(&[b"h2", b"http/1.1"]).await;
    let client = client_for(&url, ca);
    let (a, b, c) = three_at_once_after_one(&client).await;
    assert_eq!(*seen.alpn.lock(), vec![Some(b"h2".to_vec())]);
    assert_eq!(*seen.versions.lock(), vec![http::Version::HTTP_2; 4]);
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        1,
        "one connection for all"
    );
    for v in [a, b, c] {
        assert_eq!(v.git_version, "v1.37.2");
    }
}

#[tokio::test]
async fn a_server_without_http2_is_answered_over_http1() {
    let (url, ca, seen) = serve(&[b"http/1.1"]).await;
    let client = client_for(&url, ca);
    let (a, b, c) = three_at_once_after_one(&client).await;
    assert_eq!(*seen.versions.lock(), vec![http::Version::HTTP_11; 4]);
    assert_eq!(
        seen.connections.load(Ordering::SeqCst),
        3,
        "HTTP/1.1 holds a connection per request in flight"
    );
    for v in [a, b, c] {
        assert_eq!(v.git_version, "v1.37.2");
    }
}
