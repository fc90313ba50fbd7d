//! kube-scheduler's secure-serving, delegated-authentication and delegated-authorization flags, and
//! the builder that turns them into a listening [`SecureServer`].
//!
//! The names and defaults are upstream's, so that manifests written for kube-scheduler carry over.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use axum::Router;
use clap::Args;

use parking_lot::RwLock;

use crate::{
    authentication_configmap::ConfigMapAuthentication,
    authn::{
        Authenticator, RequestHeaderAuthenticator, RequestHeaderConfig, RequestHeaderTrust,
        TokenReviewAuthenticator, UnionAuthenticator, X509Authenticator,
    },
    authz::{
        AlwaysAllowPaths, Authorizer, PRIVILEGED_GROUP, PrivilegedGroups, SubjectAccessReviewAuthorizer,
        UnionAuthorizer,
    },
    client_ca::{DynamicCa, DynamicClientVerifier},
    server::{Guard, SecureServer},
    tls::{self, CertificateSource, ReloadingCertificate, TlsError},
};

/// kube-scheduler's default secure port.
pub const DEFAULT_SECURE_PORT: u16 = 10259;

/// Flags of secure serving with delegated authentication and authorization.
#[derive(Args, Clone, Debug)]
pub struct SecureServingOptions {
    /// The address to serve HTTPS on (0.0.0.0 or :: for every interface).
    #[arg(long = "bind-address", default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED))]
    pub bind_address: IpAddr,
    /// The HTTPS port for /metrics, /healthz, /livez, /readyz and /configz; 0 serves no HTTPS.
    #[arg(long = "secure-port", default_value_t = DEFAULT_SECURE_PORT)]
    pub secure_port: u16,
    /// Where the self-signed certificate is kept when --tls-cert-file is not given
    /// (`unisched.crt`, `unisched.key`); empty keeps it in memory only.
    #[arg(long = "cert-dir")]
    pub cert_dir: Option<PathBuf>,
    /// The serving certificate (PEM, intermediates after the leaf); re-read when it changes.
    #[arg(long = "tls-cert-file")]
    pub tls_cert_file: Option<PathBuf>,
    /// The serving certificate's private key (PEM).
    #[arg(long = "tls-private-key-file")]
    pub tls_private_key_file: Option<PathBuf>,
    /// CA bundle for client certificates: a certificate it signed authenticates as its common
    /// name, in the groups of its organizations. Re-read when it changes. Without it, the
    /// `client-ca-file` of the ConfigMap kube-system/extension-apiserver-authentication.
    #[arg(long = "client-ca-file")]
    pub client_ca_file: Option<PathBuf>,
    /// CA bundle of authenticating front proxies, whose user headers are trusted. Re-read when it
    /// changes. Without it, the `requestheader-*` keys of the ConfigMap
    /// kube-system/extension-apiserver-authentication (the header flags are then ignored).
    #[arg(long = "requestheader-client-ca-file")]
    pub requestheader_client_ca_file: Option<PathBuf>,
    /// Common names a front proxy's certificate may have (empty: any the CA signed).
    #[arg(long = "requestheader-allowed-names", value_delimiter = ',')]
    pub requestheader_allowed_names: Vec<String>,
    /// Request headers that carry the user name behind a front proxy.
    #[arg(
        long = "requestheader-username-headers",
        value_delimiter = ',',
        default_value = "X-Remote-User"
    )]
    pub requestheader_username_headers: Vec<String>,
    /// Request headers that carry the groups behind a front proxy.
    #[arg(
        long = "requestheader-group-headers",
        value_delimiter = ',',
        default_value = "X-Remote-Group"
    )]
    pub requestheader_group_headers: Vec<String>,
    /// Prefixes of request headers that carry extra user attributes behind a front proxy.
    #[arg(
        long = "requestheader-extra-headers-prefix",
        value_delimiter = ',',
        default_value = "X-Remote-Extra-"
    )]
    pub requestheader_extra_headers_prefix: Vec<String>,
    /// Kubeconfig for TokenReviews (default: the scheduler's own client).
    #[arg(long = "authentication-kubeconfig")]
    pub authentication_kubeconfig: Option<PathBuf>,
    /// How long TokenReview answers are cached.
    #[arg(long = "authentication-token-webhook-cache-ttl", default_value = "10s", value_parser = parse_duration)]
    pub authentication_token_webhook_cache_ttl: Duration,
    /// Kubeconfig for SubjectAccessReviews (default: the scheduler's own client).
    #[arg(long = "authorization-kubeconfig")]
    pub authorization_kubeconfig: Option<PathBuf>,
    /// How long allowed SubjectAccessReview answers are cached.
    #[arg(long = "authorization-webhook-cache-authorized-ttl", default_value = "10s", value_parser = parse_duration)]
    pub authorization_webhook_cache_authorized_ttl: Duration,
    /// How long denied SubjectAccessReview answers are cached.
    #[arg(long = "authorization-webhook-cache-unauthorized-ttl", default_value = "10s", value_parser = parse_duration)]
    pub authorization_webhook_cache_unauthorized_ttl: Duration,
    /// Paths served without authentication or authorization; a trailing `*` matches a prefix.
    #[arg(
        long = "authorization-always-allow-paths",
        value_delimiter = ',',
        default_value = "/healthz,/readyz,/livez"
    )]
    pub authorization_always_allow_paths: Vec<String>,
}

impl Default for SecureServingOptions {
    /// The same defaults as the flags (checked against clap's by a test).
    fn default() -> Self {
        let strings = |values: &[&str]| values.iter().map(|v| v.to_string()).collect();
        let ten_seconds = Duration::from_secs(10);
        SecureServingOptions {
            bind_address: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            secure_port: DEFAULT_SECURE_PORT,
            cert_dir: None,
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            requestheader_client_ca_file: None,
            requestheader_allowed_names: Vec::new(),
            requestheader_username_headers: strings(&["X-Remote-User"]),
            requestheader_group_headers: strings(&["X-Remote-Group"]),
            requestheader_extra_headers_prefix: strings(&["X-Remote-Extra-"]),
            authentication_kubeconfig: None,
            authentication_token_webhook_cache_ttl: ten_seconds,
            authorization_kubeconfig: None,
            authorization_webhook_cache_authorized_ttl: ten_seconds,
            authorization_webhook_cache_unauthorized_ttl: ten_seconds,
            authorization_always_allow_paths: strings(&["/healthz", "/readyz", "/livez"]),
        }
    }
}

/// Why secure serving could not start.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Certificates or keys are unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A kubeconfig could not be read.
    #[error("reading kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// A client could not be built from a kubeconfig.
    #[error("building a client from {}: {source}", path.display())]
    Client {
        /// The kubeconfig.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: kube::Error,
    },
    /// The port could not be bound.
    #[error("binding {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// What went wrong.
        #[source]
        source: std::io::Error,
    },
}

/// A Go-style duration: `10s`, `1m30s`, `500ms`, `2h`, `0`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(digits);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_len);
        let number: f64 = number.parse().map_err(|_| format!("invalid duration {text:?}"))?;
        let seconds = match unit {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(format!("invalid duration {text:?}: unknown unit {unit:?}")),
        };
        total += Duration::from_secs_f64(number * seconds);
        rest = tail;
    }
    if text.is_empty() {
        return Err("invalid duration \"\"".into());
    }
    Ok(total)
}

impl SecureServingOptions {
    /// False with `--secure-port 0`.
    pub fn enabled(&self) -> bool {
        self.secure_port != 0
    }

    /// Where HTTPS is served.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::new(self.bind_address, self.secure_port)
    }

    /// A builder for the server these flags describe.
    pub fn builder(&self) -> SecureServingBuilder {
        SecureServingBuilder {
            options: self.clone(),
            default_client: None,
            listener: None,
        }
    }
}

/// Builds a [`SecureServer`] from [`SecureServingOptions`].
#[must_use]
pub struct SecureServingBuilder {
    options: SecureServingOptions,
    default_client: Option<kube::Client>,
    listener: Option<tokio::net::TcpListener>,
}

async fn client_from(path: &Path) -> Result<kube::Client, BuildError> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|source| BuildError::Kubeconfig {
        path: path.to_path_buf(),
        source,
    })?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|source| BuildError::Kubeconfig {
                path: path.to_path_buf(),
                source,
            })?;
    kube::Client::try_from(config).map_err(|source| BuildError::Client {
        path: path.to_path_buf(),
        source,
    })
}

impl SecureServingBuilder {
    /// The client for TokenReviews and SubjectAccessReviews when no `--authentication-kubeconfig`
    /// or `--authorization-kubeconfig` is given. Without any, bearer tokens are not accepted and
    /// only always-allowed paths and `system:masters` are authorized, as upstream does when it
    /// finds no cluster to delegate to.
    pub fn default_client(mut self, client: kube::Client) -> Self {
        self.default_client = Some(client);
        self
    }

    /// Serves on `listener` instead of binding `--bind-address`:`--secure-port` (tests bind
    /// `127.0.0.1:0` first, since port 0 means "no HTTPS").
    pub fn listener(mut self, listener: tokio::net::TcpListener) -> Self {
        self.listener = Some(listener);
        self
    }

    async fn client(
        &self,
        path: Option<&PathBuf>,
        purpose: &str,
    ) -> Result<Option<kube::Client>, BuildError> {
        match path {
            Some(path) => client_from(path).await.map(Some),
            None => {
                if self.default_client.is_none() {
                    tracing::warn!("no client for {purpose}: they are not made");
                }
                Ok(self.default_client.clone())
            }
        }
    }

    /// The client CA and the front-proxy authentication: from the flags' files, else from the
    /// ConfigMap kube-system/extension-apiserver-authentication through `client` (read once now,
    /// then followed by [`Authorities::configmap`]'s watch).
    pub async fn authorities(&self, client: Option<&kube::Client>) -> Result<Authorities, BuildError> {
        let options = &self.options;
        let mut client_ca = match &options.client_ca_file {
            Some(path) => Some(DynamicCa::from_file(path)?),
            None => None,
        };
        let mut request_header = match &options.requestheader_client_ca_file {
            Some(path) => Some(RequestHeaderTrust {
                authority: DynamicCa::from_file(path)?,
                config: Arc::new(RwLock::new(RequestHeaderConfig {
                    allowed_names: options.requestheader_allowed_names.clone(),
                    username_headers: options.requestheader_username_headers.clone(),
                    group_headers: options.requestheader_group_headers.clone(),
                    extra_headers_prefixes: options.requestheader_extra_headers_prefix.clone(),
                })),
            }),
            None => None,
        };
        let (want_client_ca, want_request_header) = (client_ca.is_none(), request_header.is_none());
        let mut configmap = None;
        if want_client_ca || want_request_header {
            match client {
                None => tracing::warn!(
                    "no client to read configmap/{} in {}: client certificates and front proxies \
                     are only trusted with --client-ca-file and --requestheader-client-ca-file",
                    crate::authentication_configmap::NAME,
                    crate::authentication_configmap::NAMESPACE,
                ),
                Some(client) => {
                    let loaded =
                        ConfigMapAuthentication::load(client.clone(), want_client_ca, want_request_header)
                            .await;
                    client_ca = client_ca.or_else(|| loaded.client_ca());
                    request_header = request_header.or_else(|| loaded.request_header());
                    configmap = Some(Arc::new(loaded));
                }
            }
        }
        Ok(Authorities {
            client_ca,
            request_header,
            configmap,
        })
    }

    /// The guard of these options: authenticators and authorizers in upstream's order, the
    /// certificate authenticators trusting `authorities`.
    pub async fn guard(&self, authorities: &Authorities) -> Result<Guard, BuildError> {
        let options = &self.options;
        let mut authenticators: Vec<Arc<dyn Authenticator>> = Vec::new();
        if let Some(request_header) = &authorities.request_header {
            authenticators.push(Arc::new(RequestHeaderAuthenticator::new(
                request_header.authority.clone(),
                request_header.config.clone(),
            )));
        }
        if let Some(client_ca) = &authorities.client_ca {
            authenticators.push(Arc::new(X509Authenticator::new(client_ca.clone())));
        }
        let authentication = options.authentication_kubeconfig.as_ref();
        if let Some(client) = self.client(authentication, "TokenReviews").await? {
            authenticators.push(Arc::new(TokenReviewAuthenticator::new(
                client,
                options.authentication_token_webhook_cache_ttl,
            )));
        }
        let mut authorizers: Vec<Arc<dyn Authorizer>> =
            vec![Arc::new(PrivilegedGroups(vec![PRIVILEGED_GROUP.to_string()]))];
        let authorization = options.authorization_kubeconfig.as_ref();
        if let Some(client) = self.client(authorization, "SubjectAccessReviews").await? {
            authorizers.push(Arc::new(SubjectAccessReviewAuthorizer::new(
                client,
                options.authorization_webhook_cache_authorized_ttl,
                options.authorization_webhook_cache_unauthorized_ttl,
            )));
        }
        Ok(Guard::new(
            AlwaysAllowPaths::new(&options.authorization_always_allow_paths),
            UnionAuthenticator::new(authenticators),
            UnionAuthorizer::new(authorizers),
        ))
    }

    /// Binds the port and returns the server for `router`, behind authentication and
    /// authorization; `Ok(None)` with `--secure-port 0`.
    pub async fn bind(mut self, router: Router) -> Result<Option<SecureServer>, BuildError> {
        let given_listener = self.listener.take();
        let options = &self.options;
        if !options.enabled() && given_listener.is_none() {
            return Ok(None);
        }
        let cert_dir = options.cert_dir.as_deref();
        let source = CertificateSource::resolve(
            options.tls_cert_file.as_deref(),
            options.tls_private_key_file.as_deref(),
            cert_dir,
        )?;
        let certificate = Arc::new(ReloadingCertificate::new(source)?);
        // The ConfigMap is read with the TokenReviews' client, as upstream (the warning about a
        // missing client comes from `authorities`).
        let authentication_client = match &options.authentication_kubeconfig {
            Some(path) => Some(client_from(path).await?),
            None => self.default_client.clone(),
        };
        let authorities = self.authorities(authentication_client.as_ref()).await?;
        let client_verifier = Arc::new(DynamicClientVerifier::new(authorities.handshake()));
        let config = tls::server_config(certificate.clone(), client_verifier.clone())?;
        let app = Arc::new(self.guard(&authorities).await?).protect(router);
        let listener = match given_listener {
            Some(listener) => listener,
            None => {
                let addr = options.address();
                tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| BuildError::Bind { addr, source })?
            }
        };
        let watch = authorities.configmap.map(ConfigMapAuthentication::spawn_watch);
        Ok(Some(SecureServer::new(
            listener,
            config,
            certificate,
            client_verifier,
            app,
            watch,
        )))
    }
}

/// What client certificates are checked against, shared by the handshake and the authenticators.
#[derive(Debug)]
pub struct Authorities {
    /// The client CA (`--client-ca-file` or the ConfigMap's), when there is one.
    pub client_ca: Option<Arc<DynamicCa>>,
    /// Front-proxy authentication (`--requestheader-*` or the ConfigMap's), when on.
    pub request_header: Option<RequestHeaderTrust>,
    /// The ConfigMap that feeds either, to be followed while serving.
    pub configmap: Option<Arc<ConfigMapAuthentication>>,
}

impl Authorities {
    /// The bundles a client certificate may chain to during the handshake.
    pub fn handshake(&self) -> Vec<Arc<DynamicCa>> {
        self.client_ca
            .iter()
            .cloned()
            .chain(self.request_header.iter().map(|r| r.authority.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Command {
        #[command(flatten)]
        options: SecureServingOptions,
    }

    fn parse(args: &[&str]) -> SecureServingOptions {
        let args = std::iter::once("unisched").chain(args.iter().copied());
        <Command as clap::Parser>::try_parse_from(args).unwrap().options
    }

    #[test]
    fn defaults_are_kube_schedulers() {
        let options = parse(&[]);
        assert_eq!(
            format!("{options:?}"),
            format!("{:?}", SecureServingOptions::default())
        );
        assert_eq!(options.address(), "0.0.0.0:10259".parse().unwrap());
        assert_eq!(
            options.authorization_always_allow_paths,
            ["/healthz", "/readyz", "/livez"]
        );
        assert_eq!(options.requestheader_username_headers, ["X-Remote-User"]);
        assert_eq!(options.requestheader_group_headers, ["X-Remote-Group"]);
        assert_eq!(options.requestheader_extra_headers_prefix, ["X-Remote-Extra-"]);
        assert_eq!(
            options.authentication_token_webhook_cache_ttl,
            Duration::from_secs(10)
        );
        assert_eq!(
            options.authorization_webhook_cache_authorized_ttl,
            Duration::from_secs(10)
        );
        assert_eq!(
            options.authorization_webhook_cache_unauthorized_ttl,
            Duration::from_secs(10)
        );
        assert!(options.cert_dir.is_none());
        assert!(options.enabled());
    }

    #[test]
    fn flags_parse_with_kube_schedulers_names() {
        let options = parse(&[
            "--secure-port=0",
            "--bind-address=127.0.0.1",
            "--authorization-always-allow-paths=/healthz,/debug/*",
            "--requestheader-allowed-names=front-proxy-client,aggregator",
            "--authentication-token-webhook-cache-ttl=1m",
            "--cert-dir=/var/run/unisched",
        ]);
        assert!(!options.enabled());
        assert_eq!(options.authorization_always_allow_paths, ["/healthz", "/debug/*"]);
        assert_eq!(
            options.requestheader_allowed_names,
            ["front-proxy-client", "aggregator"]
        );
        assert_eq!(
            options.authentication_token_webhook_cache_ttl,
            Duration::from_secs(60)
        );
        assert_eq!(options.cert_dir.as_deref(), Some(Path::new("/var/run/unisched")));
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("").is_err());
    }
}
