//! Who is asking: the authenticators of delegated authentication, tried in kube-scheduler's order.
//!
//! 1. [`RequestHeaderAuthenticator`]: an authenticating front proxy (the API server's aggregation
//!    layer) proves itself with a client certificate from the front-proxy CA and names the user in
//!    headers. The headers are trusted only behind that certificate.
//! 2. [`X509Authenticator`]: a client certificate from the client CA; the user is the subject's
//!    common name, the groups its organizations.
//! 3. [`TokenReviewAuthenticator`]: a bearer token, checked by the API server with a `TokenReview`
//!    and cached, so that a scrape every few seconds costs one review per TTL.
//!
//! The first that recognises the request wins. When none does and none failed, the request is
//! anonymous (`system:anonymous`, group `system:unauthenticated`) and authorization decides; when
//! one failed (a token the API server rejects), the answer is 401.

use std::{collections::BTreeMap, future::Future, pin::Pin, sync::Arc, time::Duration};

use http::{HeaderMap, Request, header::AUTHORIZATION};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use parking_lot::RwLock;
use rustls_pki_types::{CertificateDer, UnixTime};

use crate::{cache::TtlCache, client_ca::DynamicCa};

/// The user name given to requests without credentials.
pub const ANONYMOUS_USER: &str = "system:anonymous";
/// The group of requests without credentials.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// The group of every authenticated user (added by the API server to token users, and by us to
/// certificate and front-proxy users, as upstream does).
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

/// An authenticated (or anonymous) user, as authorization sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// The user name (`system:serviceaccount:<namespace>:<name>` for service accounts).
    pub name: String,
    /// A unique id, when the authenticator knows one.
    pub uid: String,
    /// The groups the user belongs to.
    pub groups: Vec<String>,
    /// Further attributes (for example a service account token's pod name).
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The user of requests without credentials.
    pub fn anonymous() -> Self {
        UserInfo {
            name: ANONYMOUS_USER.to_string(),
            groups: vec![UNAUTHENTICATED_GROUP.to_string()],
            ..UserInfo::default()
        }
    }

    fn with_authenticated_group(mut self) -> Self {
        if !self.groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
            self.groups.push(AUTHENTICATED_GROUP.to_string());
        }
        self
    }
}

/// Why a request could not be authenticated (answered with 401 Unauthorized).
#[derive(Debug, thiserror::Error)]
pub enum AuthnError {
    /// The client certificate does not chain to the authority this authenticator trusts.
    #[error("verifying certificate: {0}")]
    Verify(#[source] rustls::Error),
    /// The client certificate could not be parsed.
    #[error("parsing certificate: {0}")]
    Parse(#[source] x509_parser::error::X509Error),
    /// A front proxy's certificate is valid but its common name is not among the allowed names.
    #[error("x509: subject with cn={common_name} is not in the allowed list")]
    NameNotAllowed {
        /// The certificate's common name.
        common_name: String,
    },
    /// The API server did not accept the bearer token.
    #[error("invalid bearer token")]
    InvalidToken,
    /// The API server said why it did not accept the bearer token.
    #[error("invalid bearer token, {0}")]
    TokenRejected(String),
    /// The `TokenReview` could not be made.
    #[error("token review: {0}")]
    TokenReview(#[source] kube::Error),
    /// Several authenticators failed.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "))]
    Several(Vec<AuthnError>),
}

/// What an authenticator looks at: the request's headers and the verified client certificates.
#[derive(Clone, Copy, Debug)]
pub struct AuthnRequest<'a> {
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// The client's certificate chain (end entity first); empty without a client certificate.
    pub peer_certificates: &'a [CertificateDer<'static>],
}

impl<'a> AuthnRequest<'a> {
    /// The view of an HTTP request.
    pub fn new<B>(request: &'a Request<B>, peer_certificates: &'a [CertificateDer<'static>]) -> Self {
        AuthnRequest {
            headers: request.headers(),
            peer_certificates,
        }
    }
}

/// A boxed future, so that authenticators can be trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One way of recognising a user.
pub trait Authenticator: Send + Sync {
    /// `Ok(Some(user))` when recognised, `Ok(None)` when this authenticator does not apply (no
    /// certificate, no token), `Err` when the credentials it applies to are wrong.
    fn authenticate<'a>(
        &'a self,
        request: AuthnRequest<'a>,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, AuthnError>>;
}

/// The first authenticator that recognises the request wins; errors count only when none does.
#[derive(Default)]
pub struct UnionAuthenticator {
    authenticators: Vec<Arc<dyn Authenticator>>,
}

impl UnionAuthenticator {
    /// Tries `authenticators` in order.
    pub fn new(authenticators: Vec<Arc<dyn Authenticator>>) -> Self {
        UnionAuthenticator { authenticators }
    }

    /// The user of `request`: anonymous when no authenticator applies and none failed.
    pub async fn authenticate_or_anonymous(&self, request: AuthnRequest<'_>) -> Result<UserInfo, AuthnError> {
        match self.authenticate(request).await? {
            Some(user) => Ok(user),
            None => Ok(UserInfo::anonymous()),
        }
    }
}

impl Authenticator for UnionAuthenticator {
    fn authenticate<'a>(
        &'a self,
        request: AuthnRequest<'a>,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, AuthnError>> {
        Box::pin(async move {
            let mut errors = Vec::new();
            for authenticator in &self.authenticators {
                match authenticator.authenticate(request).await {
                    Ok(Some(user)) => return Ok(Some(user)),
                    Ok(None) => {}
                    Err(e) => errors.push(e),
                }
            }
            match errors.len() {
                0 => Ok(None),
                1 => Err(errors.remove(0)),
                _ => Err(AuthnError::Several(errors)),
            }
        })
    }
}

/// Checks the peer's chain against the current bundle of `authority`; `Ok(None)` without a
/// client certificate, or while the bundle is empty (a ConfigMap without that key yet).
fn verified_end_entity<'a>(
    authority: &DynamicCa,
    chain: &'a [CertificateDer<'static>],
) -> Result<Option<&'a CertificateDer<'static>>, AuthnError> {
    let Some((end_entity, intermediates)) = chain.split_first() else {
        return Ok(None);
    };
    let Some(bundle) = authority.current() else {
        return Ok(None);
    };
    bundle
        .verifier()
        .verify_client_cert(end_entity, intermediates, UnixTime::now())
        .map_err(AuthnError::Verify)?;
    Ok(Some(end_entity))
}

/// The subject's common name and organizations.
fn subject_names(certificate: &CertificateDer<'_>) -> Result<(String, Vec<String>), AuthnError> {
    use x509_parser::prelude::{FromDer, X509Certificate};
    let (_, parsed) = X509Certificate::from_der(certificate.as_ref()).map_err(|e| {
        AuthnError::Parse(match e {
            x509_parser::nom::Err::Error(e) | x509_parser::nom::Err::Failure(e) => e,
            x509_parser::nom::Err::Incomplete(_) => x509_parser::error::X509Error::InvalidCertificate,
        })
    })?;
    let subject = parsed.subject();
    let common_name = subject
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string();
    let organizations = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .map(str::to_string)
        .collect();
    Ok((common_name, organizations))
}

/// A client certificate from the client CA (`--client-ca-file`, or the ConfigMap's).
pub struct X509Authenticator {
    authority: Arc<DynamicCa>,
}

impl X509Authenticator {
    /// Trusts certificates that chain to the current bundle of `authority`.
    pub fn new(authority: Arc<DynamicCa>) -> Self {
        X509Authenticator { authority }
    }
}

impl Authenticator for X509Authenticator {
    fn authenticate<'a>(
        &'a self,
        request: AuthnRequest<'a>,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, AuthnError>> {
        Box::pin(async move {
            let Some(end_entity) = verified_end_entity(&self.authority, request.peer_certificates)? else {
                return Ok(None);
            };
            let (name, groups) = subject_names(end_entity)?;
            if name.is_empty() {
                return Ok(None);
            }
            Ok(Some(
                UserInfo {
                    name,
                    groups,
                    ..UserInfo::default()
                }
                .with_authenticated_group(),
            ))
        })
    }
}

/// The `--requestheader-*` settings (or the ConfigMap's keys of the same names).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHeaderConfig {
    /// Common names a front proxy's certificate may have; empty allows any from the CA.
    pub allowed_names: Vec<String>,
    /// Headers that may carry the user name; the first present one wins.
    pub username_headers: Vec<String>,
    /// Headers that carry groups (each value, and each header, adds).
    pub group_headers: Vec<String>,
    /// Prefixes of headers that carry extra attributes (`<prefix><key>: <value>`).
    pub extra_headers_prefixes: Vec<String>,
}

impl Default for RequestHeaderConfig {
    fn default() -> Self {
        RequestHeaderConfig {
            allowed_names: Vec::new(),
            username_headers: vec!["X-Remote-User".into()],
            group_headers: vec!["X-Remote-Group".into()],
            extra_headers_prefixes: vec!["X-Remote-Extra-".into()],
        }
    }
}

/// Request-header settings that may change while serving (the ConfigMap's follow its updates).
pub type SharedRequestHeaderConfig = Arc<RwLock<RequestHeaderConfig>>;

/// Whom front proxies are trusted through: their CA and the header settings.
#[derive(Clone, Debug)]
pub struct RequestHeaderTrust {
    /// The front-proxy CA.
    pub authority: Arc<DynamicCa>,
    /// The header settings.
    pub config: SharedRequestHeaderConfig,
}

/// A front proxy vouching for a user in headers, behind a certificate from the front-proxy CA.
pub struct RequestHeaderAuthenticator {
    authority: Arc<DynamicCa>,
    config: SharedRequestHeaderConfig,
}

impl RequestHeaderAuthenticator {
    /// Trusts front proxies whose certificates chain to the current bundle of `authority`, with
    /// the settings `config` holds at each request.
    pub fn new(authority: Arc<DynamicCa>, config: SharedRequestHeaderConfig) -> Self {
        RequestHeaderAuthenticator { authority, config }
    }

    fn user_from_headers(config: &RequestHeaderConfig, headers: &HeaderMap) -> Option<UserInfo> {
        let values = |name: &str| {
            headers
                .get_all(name)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        let name = config
            .username_headers
            .iter()
            .filter_map(|h| headers.get(h.as_str()).and_then(|v| v.to_str().ok()))
            .find(|v| !v.is_empty())?
            .to_string();
        let groups = config.group_headers.iter().flat_map(|h| values(h)).collect();
        let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (header, value) in headers {
            let header = header.as_str();
            let Some(key) = config.extra_headers_prefixes.iter().find_map(|prefix| {
                let prefix = prefix.to_ascii_lowercase();
                header.strip_prefix(prefix.as_str()).filter(|k| !k.is_empty())
            }) else {
                continue;
            };
            if let Ok(value) = value.to_str() {
                extra
                    .entry(unescape_extra_key(key))
                    .or_default()
                    .push(value.to_string());
            }
        }
        Some(
            UserInfo {
                name,
                uid: String::new(),
                groups,
                extra,
            }
            .with_authenticated_group(),
        )
    }
}

/// Extra keys travel percent-encoded in header names (which are case-insensitive, so keys are
/// lower case).
fn unescape_extra_key(key: &str) -> String {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%')
            .then(|| bytes.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match decoded {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).to_lowercase()
}

impl Authenticator for RequestHeaderAuthenticator {
    fn authenticate<'a>(
        &'a self,
        request: AuthnRequest<'a>,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, AuthnError>> {
        Box::pin(async move {
            let Some(end_entity) = verified_end_entity(&self.authority, request.peer_certificates)? else {
                return Ok(None);
            };
            let config = self.config.read().clone();
            if !config.allowed_names.is_empty() {
                let (common_name, _) = subject_names(end_entity)?;
                if !config.allowed_names.contains(&common_name) {
                    return Err(AuthnError::NameNotAllowed { common_name });
                }
            }
            Ok(Self::user_from_headers(&config, request.headers))
        })
    }
}

/// The bearer token of an `Authorization: Bearer <token>` header.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' ')).then_some(token)
}

/// A bearer token checked by the API server with a `TokenReview` (authentication.k8s.io/v1).
pub struct TokenReviewAuthenticator {
    client: kube::Client,
    /// Keyed by the token's SHA-256, so that tokens are not kept in memory.
    cache: TtlCache<Vec<u8>, Option<UserInfo>>,
    ttl: Duration,
}

impl TokenReviewAuthenticator {
    /// Reviews tokens with `client`; answers, accepted or not, are kept for `ttl`.
    pub fn new(client: kube::Client, ttl: Duration) -> Self {
        TokenReviewAuthenticator {
            client,
            cache: TtlCache::default(),
            ttl,
        }
    }

    async fn review(&self, token: &str) -> Result<Option<UserInfo>, AuthnError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_string(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let reviewed: TokenReview = post(
            &self.client,
            "/apis/authentication.k8s.io/v1/tokenreviews",
            &review,
        )
        .await
        .map_err(AuthnError::TokenReview)?;
        let status = reviewed.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return match status.error.filter(|e| !e.is_empty()) {
                Some(reason) => Err(AuthnError::TokenRejected(reason)),
                None => Ok(None),
            };
        }
        let user = status.user.unwrap_or_default();
        Ok(Some(UserInfo {
            name: user.username.unwrap_or_default(),
            uid: user.uid.unwrap_or_default(),
            groups: user.groups.unwrap_or_default(),
            extra: user.extra.unwrap_or_default(),
        }))
    }
}

impl Authenticator for TokenReviewAuthenticator {
    fn authenticate<'a>(
        &'a self,
        request: AuthnRequest<'a>,
    ) -> BoxFuture<'a, Result<Option<UserInfo>, AuthnError>> {
        Box::pin(async move {
            let Some(token) = bearer_token(request.headers) else {
                return Ok(None);
            };
            let key = ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
                .as_ref()
                .to_vec();
            let user = match self.cache.get(&key) {
                Some(user) => user,
                None => {
                    let user = self.review(token).await;
                    // A rejection with a reason is a negative answer too, and is cached as one.
                    let cached = match &user {
                        Ok(user) => Some(user.clone()),
                        Err(AuthnError::TokenRejected(_)) => Some(None),
                        Err(_) => None,
                    };
                    if let Some(cached) = cached {
                        self.cache.insert(key, cached, self.ttl);
                    }
                    user?
                }
            };
            user.map(Some).ok_or(AuthnError::InvalidToken)
        })
    }
}

/// POSTs `body` to `path` on the API server and decodes the answer.
pub(crate) async fn post<T>(client: &kube::Client, path: &str, body: &T) -> Result<T, kube::Error>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let body = serde_json::to_vec(body).map_err(kube::Error::SerdeError)?;
    let request = Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    client.request(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_are_read_like_upstream() {
        let headers = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(AUTHORIZATION, v.parse().unwrap());
            h
        };
        assert_eq!(bearer_token(&headers("Bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("bearer abc")), Some("abc"));
        assert_eq!(bearer_token(&headers("Basic abc")), None);
        assert_eq!(bearer_token(&headers("Bearer ")), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }

    #[test]
    fn extra_keys_are_unescaped_and_lower_case() {
        assert_eq!(unescape_extra_key("scopes"), "scopes");
        assert_eq!(unescape_extra_key("example.com%2fkey"), "example.com/key");
        assert_eq!(unescape_extra_key("bad%zz"), "bad%zz");
    }
}
