//! The HTTPS accept loop and the authentication and authorization layer in front of the router.
//!
//! Each connection: reload the serving certificate and the client CA files if they changed (a few
//! `stat`s), the TLS handshake (bounded in time, so that silent clients cannot pile up), then
//! HTTP/2 or HTTP/1.1 as ALPN chose (HTTP/1.1 without ALPN), with the connection's verified client
//! certificates attached to every request for [`Guard`] to read.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::{
    Router,
    extract::{Request, State},
    middleware::Next,
    response::Response,
};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use rustls_pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::{
    authn::{AuthnRequest, UnionAuthenticator},
    authz::{AlwaysAllowPaths, Attributes, Authorizer, Decision, UnionAuthorizer, verb_of},
    client_ca::DynamicClientVerifier,
    response,
    tls::ReloadingCertificate,
};

/// How long a client may take to finish the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The client certificate chain a connection's handshake verified (empty without one).
#[derive(Clone, Debug, Default)]
pub struct PeerCertificates(pub Arc<Vec<CertificateDer<'static>>>);

/// Authentication and authorization in front of every route.
pub struct Guard {
    always_allow: AlwaysAllowPaths,
    authenticator: UnionAuthenticator,
    authorizer: UnionAuthorizer,
}

impl Guard {
    /// Every request is authenticated; paths in `always_allow` then pass, the rest is authorized.
    pub fn new(
        always_allow: AlwaysAllowPaths,
        authenticator: UnionAuthenticator,
        authorizer: UnionAuthorizer,
    ) -> Self {
        Guard {
            always_allow,
            authenticator,
            authorizer,
        }
    }

    /// `router` behind this guard.
    pub fn protect(self: Arc<Self>, router: Router) -> Router {
        router.layer(axum::middleware::from_fn_with_state(self, guard))
    }
}

async fn guard(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let path = request.uri().path().to_string();
    let peer = request
        .extensions()
        .get::<PeerCertificates>()
        .cloned()
        .unwrap_or_default();
    let user = match guard
        .authenticator
        .authenticate_or_anonymous(AuthnRequest::new(&request, &peer.0))
        .await
    {
        Ok(user) => user,
        Err(error) => {
            tracing::debug!(%error, %path, "unable to authenticate the request");
            return response::unauthorized();
        }
    };
    // As upstream's handler chain: every request is authenticated (so wrong credentials get 401
    // everywhere); the always-allowed paths then skip authorization only.
    if guard.always_allow.matches(&path) {
        return next.run(request).await;
    }
    let attributes = Attributes {
        verb: verb_of(request.method()),
        path,
        user,
    };
    match guard.authorizer.authorize(&attributes).await {
        Ok(Decision::Allow) => next.run(request).await,
        Ok(Decision::Deny { reason } | Decision::NoOpinion { reason }) => {
            let message = response::forbidden_message(
                &attributes.user.name,
                &attributes.verb,
                &attributes.path,
                &reason,
            );
            tracing::debug!(%message, "forbidden");
            response::forbidden(&message)
        }
        Err(error) => {
            tracing::error!(%error, path = %attributes.path, "authorization failed");
            response::internal_error()
        }
    }
}

/// Aborts a background task when dropped: the ConfigMap watch ends with the server.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A bound HTTPS listener, ready to serve.
pub struct SecureServer {
    listener: TcpListener,
    acceptor: TlsAcceptor,
    certificate: Arc<ReloadingCertificate>,
    client_verifier: Arc<DynamicClientVerifier>,
    app: Router,
    _watch: Option<AbortOnDrop>,
}

impl SecureServer {
    /// Serves `app` (already behind its [`Guard`]) over TLS on `listener`; `watch` (the
    /// authentication ConfigMap's) runs as long as the server does.
    pub fn new(
        listener: TcpListener,
        config: rustls::ServerConfig,
        certificate: Arc<ReloadingCertificate>,
        client_verifier: Arc<DynamicClientVerifier>,
        app: Router,
        watch: Option<tokio::task::JoinHandle<()>>,
    ) -> Self {
        SecureServer {
            listener,
            acceptor: TlsAcceptor::from(Arc::new(config)),
            certificate,
            client_verifier,
            app,
            _watch: watch.map(AbortOnDrop),
        }
    }

    /// Where it listens.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the task is dropped or aborted.
    pub fn spawn(self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(self.run())
    }

    /// Accepts connections forever.
    pub async fn run(self) {
        loop {
            let (stream, remote) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                Err(error) => {
                    // Out of file descriptors and the like: pause instead of spinning.
                    tracing::warn!(%error, "accepting a connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let acceptor = self.acceptor.clone();
            let certificate = self.certificate.clone();
            let client_verifier = self.client_verifier.clone();
            let app = self.app.clone();
            tokio::spawn(async move {
                certificate.reload_if_changed();
                client_verifier.reload_if_changed();
                let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(error)) => {
                        tracing::debug!(%error, %remote, "TLS handshake failed");
                        return;
                    }
                    Err(_) => {
                        tracing::debug!(%remote, "TLS handshake timed out");
                        return;
                    }
                };
                let peer = PeerCertificates(Arc::new(
                    tls.get_ref()
                        .1
                        .peer_certificates()
                        .map(<[_]>::to_vec)
                        .unwrap_or_default(),
                ));
                let service =
                    hyper::service::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
                        request.extensions_mut().insert(peer.clone());
                        let mut app = app.clone();
                        async move { tower::Service::call(&mut app, request).await }
                    });
                let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2".as_slice());
                let builder = auto::Builder::new(TokioExecutor::new());
                let served = if h2 {
                    builder
                        .http2_only()
                        .serve_connection(TokioIo::new(tls), service)
                        .await
                } else {
                    builder
                        .http1_only()
                        .serve_connection(TokioIo::new(tls), service)
                        .await
                };
                if let Err(error) = served {
                    tracing::debug!(%error, %remote, "serving a connection");
                }
            });
        }
    }
}
