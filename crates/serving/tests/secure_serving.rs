//! The authentication and authorization matrix of secure serving, end to end: a real TLS listener
//! on 127.0.0.1, rustls clients with and without client certificates, and a fake API server that
//! answers TokenReviews and SubjectAccessReviews and counts them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{
    net::SocketAddr,
    sync::{Arc, atomic::Ordering},
};

use axum::{Router, routing::get};
use common::{
    AcceptAnyServer, ApiCalls, Authority, ClientIdentity, PROMETHEUS, TempDir, Trust, fake_api_server,
    get_path, temp_dir,
};
use parking_lot::Mutex;
use rustls::ClientConfig;
use rustls_pki_types::{CertificateDer, ServerName, pem::PemObject};
use unisched_serving::{SecureServingOptions, tls};

fn app() -> Router {
    Router::new()
        .route("/metrics", get(|| async { "scheduler_pending_pods 0\n" }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/configz", get(|| async { "{}" }))
}

/// The server under test: a written serving certificate, a client CA and a front-proxy CA.
struct Fixture {
    addr: SocketAddr,
    trust: Trust,
    calls: Arc<ApiCalls>,
    client_ca: Authority,
    front_proxy_ca: Authority,
    _dir: TempDir,
}

async fn fixture(name: &str, allowed_names: &[&str]) -> Fixture {
    let dir = temp_dir(name);
    let serving = tls::self_signed("").unwrap();
    std::fs::write(dir.0.join("tls.crt"), &serving.certificate).unwrap();
    std::fs::write(dir.0.join("tls.key"), &serving.key).unwrap();
    let client_ca = Authority::new("client-ca");
    let front_proxy_ca = Authority::new("front-proxy-ca");
    let options = SecureServingOptions {
        tls_cert_file: Some(dir.0.join("tls.crt")),
        tls_private_key_file: Some(dir.0.join("tls.key")),
        client_ca_file: Some(client_ca.write(&dir.0, "client-ca.crt")),
        requestheader_client_ca_file: Some(front_proxy_ca.write(&dir.0, "front-proxy-ca.crt")),
        requestheader_allowed_names: allowed_names.iter().map(|s| s.to_string()).collect(),
        ..SecureServingOptions::default()
    };
    let (client, calls) = fake_api_server().await;
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
    let trust = Trust::Certificate(CertificateDer::from_pem_slice(serving.certificate.as_bytes()).unwrap());
    Fixture {
        addr,
        trust,
        calls,
        client_ca,
        front_proxy_ca,
        _dir: dir,
    }
}

impl Fixture {
    async fn get(
        &self,
        path: &str,
        identity: Option<&ClientIdentity>,
        headers: &[(&str, &str)],
    ) -> (u16, String) {
        get_path(self.addr, &self.trust, identity, path, headers)
            .await
            .unwrap()
    }
    fn reviews(&self) -> (usize, usize) {
        (
            self.calls.token_reviews.load(Ordering::SeqCst),
            self.calls.access_reviews.load(Ordering::SeqCst),
        )
    }
}

#[tokio::test]
async fn without_credentials_probes_pass_and_metrics_are_forbidden_to_anonymous() {
    let f = fixture("anonymous", &[]).await;
    assert_eq!(f.get("/healthz", None, &[]).await, (200, "ok".into()));
    assert_eq!(
        f.reviews(),
        (0, 0),
        "always-allowed paths ask the API server nothing"
    );
    let (status, body) = f.get("/metrics", None, &[]).await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(r#"forbidden: User \"system:anonymous\" cannot get path \"/metrics\""#),
        "{body}"
    );
    let spec = f.calls.last_access_review.lock().clone().unwrap();
    assert_eq!(spec.groups, Some(vec!["system:unauthenticated".to_string()]));
    // Even an unknown path is refused before routing, rather than answering 404.
    assert_eq!(f.get("/nothing-here", None, &[]).await.0, 403);
}

#[tokio::test]
async fn bearer_tokens_are_reviewed_authorized_and_cached() {
    let f = fixture("tokens", &[]).await;
    let bearer = |token: &str| format!("Bearer {token}");

    let (status, body) = f
        .get("/metrics", None, &[("Authorization", &bearer("wrong"))])
        .await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains(r#""reason":"Unauthorized""#), "{body}");
    // Wrong credentials are refused on the always-allowed paths too (upstream authenticates
    // every request, and only authorization has always-allowed paths); no credentials pass there.
    let (status, body) = f
        .get("/healthz", None, &[("Authorization", &bearer("wrong"))])
        .await;
    assert_eq!(status, 401, "{body}");

    let (status, body) = f
        .get("/metrics", None, &[("Authorization", &bearer("denied-token"))])
        .await;
    assert_eq!(status, 403, "{body}");
    assert!(
        body.contains(r#"forbidden: User \"system:serviceaccount:ns:name\" cannot get path \"/metrics\""#),
        "{body}"
    );

    let before = f.reviews();
    let (status, body) = f
        .get(
            "/metrics",
            None,
            &[("Authorization", &bearer("prometheus-token"))],
        )
        .await;
    assert_eq!((status, body.as_str()), (200, "scheduler_pending_pods 0\n"));
    assert_eq!(f.reviews(), (before.0 + 1, before.1 + 1));
    let spec = f.calls.last_access_review.lock().clone().unwrap();
    assert_eq!(spec.user.as_deref(), Some(PROMETHEUS));
    assert_eq!(
        spec.uid.as_deref(),
        Some("uid-of-system:serviceaccount:monitoring:prometheus")
    );
    let attributes = spec.non_resource_attributes.unwrap();
    assert_eq!(
        (attributes.path.as_deref(), attributes.verb.as_deref()),
        (Some("/metrics"), Some("get"))
    );

    // Within the TTLs the same request asks the API server nothing, allowed or denied.
    let cached = f.reviews();
    assert_eq!(
        f.get(
            "/metrics",
            None,
            &[("Authorization", &bearer("prometheus-token"))]
        )
        .await
        .0,
        200
    );
    assert_eq!(
        f.get("/metrics", None, &[("Authorization", &bearer("denied-token"))])
            .await
            .0,
        403
    );
    assert_eq!(
        f.get("/metrics", None, &[("Authorization", &bearer("wrong"))])
            .await
            .0,
        401
    );
    assert_eq!(
        f.reviews(),
        cached,
        "second identical requests are answered from the caches"
    );

    // The grant is for /metrics only.
    assert_eq!(
        f.get(
            "/configz",
            None,
            &[("Authorization", &bearer("prometheus-token"))]
        )
        .await
        .0,
        403
    );
}

#[tokio::test]
async fn client_certificates_authenticate_and_foreign_ones_are_refused() {
    let f = fixture("x509", &[]).await;
    let reader = f.client_ca.client("metrics-reader", &["monitoring"]);
    assert_eq!(f.get("/metrics", Some(&reader), &[]).await.0, 200);
    let spec = f.calls.last_access_review.lock().clone().unwrap();
    assert_eq!(spec.user.as_deref(), Some("metrics-reader"));
    assert_eq!(
        spec.groups,
        Some(vec!["monitoring".to_string(), "system:authenticated".to_string()])
    );
    assert_eq!(f.get("/configz", Some(&reader), &[]).await.0, 403);

    // system:masters is allowed without a review.
    let admin = f.client_ca.client("admin", &["system:masters"]);
    let before = f.reviews();
    assert_eq!(f.get("/configz", Some(&admin), &[]).await.0, 200);
    assert_eq!(f.reviews(), before);

    // A certificate from an authority the server does not trust gets no connection at all.
    let stranger = Authority::new("someone-else").client("metrics-reader", &[]);
    let refused = get_path(f.addr, &f.trust, Some(&stranger), "/metrics", &[]).await;
    assert!(refused.is_err(), "{refused:?}");
}

#[tokio::test]
async fn a_front_proxy_names_the_user_in_headers() {
    let f = fixture("requestheader", &["front-proxy-client"]).await;
    let proxy = f.front_proxy_ca.client("front-proxy-client", &[]);
    let headers = [
        ("X-Remote-User", "alice"),
        ("X-Remote-Group", "readers"),
        ("X-Remote-Extra-Scopes", "a"),
        ("X-Remote-Extra-Example.com%2fkey", "b"),
    ];
    assert_eq!(f.get("/metrics", Some(&proxy), &headers).await.0, 200);
    let spec = f.calls.last_access_review.lock().clone().unwrap();
    assert_eq!(spec.user.as_deref(), Some("alice"));
    assert_eq!(
        spec.groups,
        Some(vec!["readers".to_string(), "system:authenticated".to_string()])
    );
    let extra = spec.extra.unwrap();
    assert_eq!(extra.get("scopes"), Some(&vec!["a".to_string()]));
    assert_eq!(extra.get("example.com/key"), Some(&vec!["b".to_string()]));

    // The headers mean nothing without the front proxy's certificate...
    assert_eq!(f.get("/metrics", None, &headers).await.0, 403);
    let spec = f.calls.last_access_review.lock().clone().unwrap();
    assert_eq!(spec.user.as_deref(), Some("system:anonymous"));
    // ...nor behind a client certificate of the client CA (which authenticates as itself).
    let reader = f.client_ca.client("not-a-proxy", &[]);
    assert_eq!(f.get("/metrics", Some(&reader), &headers).await.0, 403);
    assert_eq!(
        f.calls.last_access_review.lock().clone().unwrap().user.as_deref(),
        Some("not-a-proxy")
    );
    // A front-proxy certificate with a name not in --requestheader-allowed-names is refused.
    let other = f.front_proxy_ca.client("other-proxy", &[]);
    assert_eq!(f.get("/metrics", Some(&other), &headers).await.0, 401);
    // A front proxy without a user header has authenticated nobody.
    assert_eq!(f.get("/metrics", Some(&proxy), &[]).await.0, 401);
}

#[tokio::test]
async fn a_self_signed_certificate_is_served_over_tls_1_2_and_up() {
    let options = SecureServingOptions::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = options
        .builder()
        .listener(listener)
        .bind(app())
        .await
        .unwrap()
        .unwrap();
    let addr = server.local_addr().unwrap();
    server.spawn();
    let verifier = Arc::new(AcceptAnyServer(Mutex::new(None)));
    let trust = Trust::Any(verifier.clone());
    assert_eq!(
        get_path(addr, &trust, None, "/healthz", &[]).await.unwrap().0,
        200
    );
    // Without a client to delegate to, nothing but the probes is authorized.
    assert_eq!(
        get_path(addr, &trust, None, "/metrics", &[]).await.unwrap().0,
        403
    );

    let served = verifier.0.lock().clone().unwrap();
    let (_, parsed) = <x509_parser::certificate::X509Certificate<'_> as x509_parser::prelude::FromDer<
        '_,
        _,
    >>::from_der(served.as_ref())
    .unwrap();
    let names = format!(
        "{:?}",
        parsed
            .subject_alternative_name()
            .unwrap()
            .unwrap()
            .value
            .general_names
    );
    assert!(names.contains(r#"DNSName("localhost")"#), "{names}");
    assert!(names.contains("IPAddress([127, 0, 0, 1])"), "{names}");

    // TLS 1.1 and below are not offered: a TLS 1.2-only client still connects, and the
    // protocol versions rustls knows below 1.2 cannot even be configured.
    let config = ClientConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS12])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(verifier.clone())
        .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(
        stream.get_ref().1.protocol_version(),
        Some(rustls::ProtocolVersion::TLSv1_2)
    );
}

#[tokio::test]
async fn secure_port_zero_serves_nothing() {
    let options = SecureServingOptions {
        secure_port: 0,
        ..SecureServingOptions::default()
    };
    assert!(options.builder().bind(app()).await.unwrap().is_none());
}
