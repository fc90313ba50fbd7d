//! What the secure-serving tests share: certificate authorities that sign client certificates,
//! an HTTPS GET with or without a client certificate, and temporary directories.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
};

use axum::{Json, Router, extract::State, routing::post};
use k8s_openapi::api::{
    authentication::v1::{TokenReview, TokenReviewStatus, UserInfo as ReviewedUser},
    authorization::v1::{SubjectAccessReview, SubjectAccessReviewSpec, SubjectAccessReviewStatus},
};

use parking_lot::Mutex;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
};
use rustls::{
    ClientConfig, RootCertStore,
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime, pem::PemObject};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use unisched_serving::tls;

pub const PROMETHEUS: &str = "system:serviceaccount:monitoring:prometheus";
pub const DENIED: &str = "system:serviceaccount:ns:name";

/// What the fake API server saw.
#[derive(Default)]
pub struct ApiCalls {
    pub token_reviews: AtomicUsize,
    pub access_reviews: AtomicUsize,
    pub last_access_review: Mutex<Option<SubjectAccessReviewSpec>>,
}

async fn token_review(
    State(calls): State<Arc<ApiCalls>>,
    Json(review): Json<TokenReview>,
) -> Json<TokenReview> {
    calls.token_reviews.fetch_add(1, Ordering::SeqCst);
    let user = match review.spec.token.as_str() {
        "prometheus-token" => Some(PROMETHEUS),
        "denied-token" => Some(DENIED),
        _ => None,
    };
    Json(TokenReview {
        status: Some(TokenReviewStatus {
            authenticated: Some(user.is_some()),
            user: user.map(|name| ReviewedUser {
                username: Some(name.to_string()),
                uid: Some(format!("uid-of-{name}")),
                groups: Some(vec![
                    "system:serviceaccounts".into(),
                    "system:authenticated".into(),
                ]),
                extra: None,
            }),
            ..TokenReviewStatus::default()
        }),
        ..review
    })
}

/// Allows `get /metrics` to Prometheus, the client-certificate user and the front-proxied user.
async fn access_review(
    State(calls): State<Arc<ApiCalls>>,
    Json(review): Json<SubjectAccessReview>,
) -> Json<SubjectAccessReview> {
    calls.access_reviews.fetch_add(1, Ordering::SeqCst);
    *calls.last_access_review.lock() = Some(review.spec.clone());
    let attributes = review.spec.non_resource_attributes.clone().unwrap_or_default();
    let user = review.spec.user.clone().unwrap_or_default();
    let allowed = ["metrics-reader", "alice", PROMETHEUS].contains(&user.as_str())
        && attributes.path.as_deref() == Some("/metrics")
        && attributes.verb.as_deref() == Some("get");
    Json(SubjectAccessReview {
        status: Some(SubjectAccessReviewStatus {
            allowed,
            ..SubjectAccessReviewStatus::default()
        }),
        ..review
    })
}

pub async fn fake_api_server() -> (kube::Client, Arc<ApiCalls>) {
    fake_api_server_with(Router::new()).await
}

/// [`fake_api_server`] that serves `more` routes too.
pub async fn fake_api_server_with(more: Router) -> (kube::Client, Arc<ApiCalls>) {
    let calls = Arc::new(ApiCalls::default());
    let app = Router::new()
        .route("/apis/authentication.k8s.io/v1/tokenreviews", post(token_review))
        .route(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            post(access_review),
        )
        .with_state(calls.clone())
        .merge(more);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    (kube::Client::try_from(config).unwrap(), calls)
}

/// A CA and the certificates it signs.
pub struct Authority {
    pub issuer: CertifiedIssuer<'static, KeyPair>,
}

/// A client certificate chain and its key, PEM.
pub struct ClientIdentity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Authority {
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let issuer = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        Authority { issuer }
    }

    pub fn write(&self, dir: &std::path::Path, name: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, self.issuer.pem()).unwrap();
        path
    }

    pub fn client(&self, common_name: &str, organizations: &[&str]) -> ClientIdentity {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, common_name);
        for organization in organizations {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *organization);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().unwrap();
        let certificate = params.signed_by(&key, &self.issuer).unwrap();
        ClientIdentity {
            chain: vec![certificate.der().clone()],
            key: PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
        }
    }
}

/// Accepts any server certificate and remembers it (for the in-memory self-signed one).
#[derive(Debug)]
pub struct AcceptAnyServer(pub Mutex<Option<CertificateDer<'static>>>);

impl ServerCertVerifier for AcceptAnyServer {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        *self.0.lock() = Some(end_entity.clone().into_owned());
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        tls::provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// How a test client trusts the server.
pub enum Trust {
    /// The serving certificate written for the test.
    Certificate(CertificateDer<'static>),
    /// Anything (the server's certificate is made in memory).
    Any(Arc<AcceptAnyServer>),
}

/// One HTTPS GET; `Err` when the connection or handshake fails.
pub async fn get_path(
    addr: SocketAddr,
    trust: &Trust,
    identity: Option<&ClientIdentity>,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
    let builder = ClientConfig::builder_with_provider(tls::provider())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match trust {
        Trust::Certificate(certificate) => {
            let mut roots = RootCertStore::empty();
            roots.add(certificate.clone()).unwrap();
            builder.with_root_certificates(roots)
        }
        Trust::Any(verifier) => builder
            .dangerous()
            .with_custom_certificate_verifier(verifier.clone()),
    };
    let config = match identity {
        Some(identity) => builder
            .with_client_auth_cert(identity.chain.clone(), identity.key.clone_key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let mut stream = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response).to_string();
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line in {response:?}")))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn temp_dir(name: &str) -> TempDir {
    let dir = std::env::temp_dir().join(format!("unisched-serving-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}
