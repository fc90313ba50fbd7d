//! The client CA and the front-proxy settings that the API server publishes in the ConfigMap
//! `kube-system/extension-apiserver-authentication`, used when the flags do not give them.
//!
//! Why: in a cluster kube-scheduler is usually started without `--client-ca-file` and
//! `--requestheader-client-ca-file`; its delegated authentication then reads the API server's own
//! settings from that ConfigMap, so that a client certificate the API server accepts, or a request
//! the aggregation layer forwards, is accepted by the scheduler too. The same here:
//!
//! - A flag wins: `--client-ca-file` replaces the `client-ca-file` key, and
//!   `--requestheader-client-ca-file` replaces every `requestheader-*` key (the header flags go
//!   with it).
//! - The ConfigMap is read once before serving (a `get`), then followed with a `list`+`watch` on
//!   its name, so that a rotated CA applies to the next handshake.
//! - A failed first read is tolerated, as kube-scheduler tolerates it: front-proxy authentication
//!   is then off, the rest keeps working (requests are anonymous rather than refused), and the
//!   client CA still arrives when the watch gets through. A ConfigMap that does not exist yet is
//!   not a failure: the bundles stay empty until it appears.
//! - Content that does not parse keeps what was loaded before.
//!
//! RBAC: the built-in Role `extension-apiserver-authentication-reader` in kube-system grants
//! exactly `get`, `list` and `watch` on this one ConfigMap.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    Api,
    runtime::{WatchStreamExt, watcher},
};
use parking_lot::RwLock;

use crate::{
    authn::{RequestHeaderConfig, RequestHeaderTrust},
    client_ca::DynamicCa,
    tls::TlsError,
};

/// The ConfigMap's namespace.
pub const NAMESPACE: &str = "kube-system";
/// The ConfigMap's name.
pub const NAME: &str = "extension-apiserver-authentication";
/// The key of the client CA bundle (PEM).
pub const CLIENT_CA_KEY: &str = "client-ca-file";
/// The key of the front-proxy CA bundle (PEM).
pub const REQUEST_HEADER_CA_KEY: &str = "requestheader-client-ca-file";
/// The keys of the front-proxy settings (JSON arrays of strings).
pub const ALLOWED_NAMES_KEY: &str = "requestheader-allowed-names";
/// See [`ALLOWED_NAMES_KEY`].
pub const USERNAME_HEADERS_KEY: &str = "requestheader-username-headers";
/// See [`ALLOWED_NAMES_KEY`].
pub const GROUP_HEADERS_KEY: &str = "requestheader-group-headers";
/// See [`ALLOWED_NAMES_KEY`].
pub const EXTRA_HEADERS_PREFIX_KEY: &str = "requestheader-extra-headers-prefix";

/// How long the first read may take before serving starts without it.
const FIRST_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the ConfigMap could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigMapError {
    /// The API server did not answer the read.
    #[error("reading configmap/{NAME} in {NAMESPACE}: {0}")]
    Get(#[source] kube::Error),
    /// The read took too long.
    #[error("reading configmap/{NAME} in {NAMESPACE}: no answer within {FIRST_READ_TIMEOUT:?}")]
    Timeout,
    /// A settings key is not a JSON array of strings.
    #[error("key {key} of configmap/{NAME}: {source}")]
    Strings {
        /// The key.
        key: &'static str,
        /// What is wrong with it.
        #[source]
        source: serde_json::Error,
    },
    /// A CA key does not hold a usable PEM bundle.
    #[error("key {key} of configmap/{NAME}: {source}")]
    Bundle {
        /// The key.
        key: &'static str,
        /// What is wrong with it.
        #[source]
        source: TlsError,
    },
}

/// A settings key: a JSON array of strings; absent or empty means none.
fn strings(data: &BTreeMap<String, String>, key: &'static str) -> Result<Vec<String>, ConfigMapError> {
    match data.get(key).filter(|v| !v.is_empty()) {
        None => Ok(Vec::new()),
        Some(json) => serde_json::from_str(json).map_err(|source| ConfigMapError::Strings { key, source }),
    }
}

/// The front-proxy settings of the ConfigMap's data.
pub fn request_header_config(data: &BTreeMap<String, String>) -> Result<RequestHeaderConfig, ConfigMapError> {
    Ok(RequestHeaderConfig {
        allowed_names: strings(data, ALLOWED_NAMES_KEY)?,
        username_headers: strings(data, USERNAME_HEADERS_KEY)?,
        group_headers: strings(data, GROUP_HEADERS_KEY)?,
        extra_headers_prefixes: strings(data, EXTRA_HEADERS_PREFIX_KEY)?,
    })
}

/// What the ConfigMap feeds, and the client that reads it.
pub struct ConfigMapAuthentication {
    client: kube::Client,
    client_ca: Option<Arc<DynamicCa>>,
    request_header: Option<RequestHeaderTrust>,
}

impl std::fmt::Debug for ConfigMapAuthentication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigMapAuthentication")
            .field("client_ca", &self.client_ca)
            .field("request_header", &self.request_header)
            .finish_non_exhaustive()
    }
}

/// Empty front-proxy settings: no header names a user until the ConfigMap says which.
fn no_request_headers() -> RequestHeaderConfig {
    RequestHeaderConfig {
        allowed_names: Vec::new(),
        username_headers: Vec::new(),
        group_headers: Vec::new(),
        extra_headers_prefixes: Vec::new(),
    }
}

impl ConfigMapAuthentication {
    /// Reads the ConfigMap once for the client CA (`want_client_ca`) and the front-proxy settings
    /// (`want_request_header`); a failure is logged and tolerated as described in the module docs.
    pub async fn load(client: kube::Client, want_client_ca: bool, want_request_header: bool) -> Self {
        let mut loaded = ConfigMapAuthentication {
            client,
            client_ca: want_client_ca.then(|| DynamicCa::pushed(CLIENT_CA_KEY)),
            request_header: want_request_header.then(|| RequestHeaderTrust {
                authority: DynamicCa::pushed(REQUEST_HEADER_CA_KEY),
                config: Arc::new(RwLock::new(no_request_headers())),
            }),
        };
        if !(want_client_ca || want_request_header) {
            return loaded;
        }
        let first = match tokio::time::timeout(FIRST_READ_TIMEOUT, loaded.api().get_opt(NAME)).await {
            Ok(Ok(found)) => Ok(found),
            Ok(Err(error)) => Err(ConfigMapError::Get(error)),
            Err(_) => Err(ConfigMapError::Timeout),
        };
        let outcome = first.and_then(|found| match found {
            Some(configmap) => loaded.apply(&configmap),
            None => {
                tracing::info!("configmap/{NAME} in {NAMESPACE} does not exist (yet)");
                Ok(())
            }
        });
        if let Err(error) = outcome {
            if loaded.request_header.take().is_some() {
                tracing::warn!(
                    %error,
                    "front-proxy (request header) authentication is off: its settings could not be read"
                );
            } else {
                tracing::warn!(%error, "the client CA is not known yet");
            }
        }
        loaded
    }

    fn api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    /// The client CA it feeds, when the flag did not give one.
    pub fn client_ca(&self) -> Option<Arc<DynamicCa>> {
        self.client_ca.clone()
    }

    /// The front-proxy authentication it feeds, when the flag did not give one and the first read
    /// did not fail.
    pub fn request_header(&self) -> Option<RequestHeaderTrust> {
        self.request_header.clone()
    }

    /// Takes what `configmap` holds. Each part that does not parse keeps its previous value; the
    /// first error is returned.
    pub fn apply(&self, configmap: &ConfigMap) -> Result<(), ConfigMapError> {
        let empty = BTreeMap::new();
        let data = configmap.data.as_ref().unwrap_or(&empty);
        let mut first_error = None;
        if let Some(authority) = &self.client_ca
            && let Err(error) = set_bundle(authority, data, CLIENT_CA_KEY)
        {
            first_error.get_or_insert(error);
        }
        if let Some(request_header) = &self.request_header {
            match request_header_config(data) {
                Ok(config) => {
                    let mut current = request_header.config.write();
                    if *current != config {
                        tracing::info!(?config, "loaded the front-proxy settings of configmap/{NAME}");
                        *current = config;
                    }
                }
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
            if let Err(error) = set_bundle(&request_header.authority, data, REQUEST_HEADER_CA_KEY) {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Follows the ConfigMap (list and watch, by name) until the task is aborted.
    pub fn spawn_watch(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let config = watcher::Config::default().fields(&format!("metadata.name={NAME}"));
            let mut events = watcher(self.api(), config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(configmap) | watcher::Event::InitApply(configmap)) => {
                        if let Err(error) = self.apply(&configmap) {
                            tracing::warn!(%error, "keeping the previous authentication settings");
                        }
                    }
                    // A deleted ConfigMap, or a relist: keep what was loaded.
                    Ok(_) => {}
                    Err(error) => tracing::warn!(%error, "watching configmap/{NAME} in {NAMESPACE}"),
                }
            }
        })
    }
}

/// Replaces `authority` with the bundle under `key`; an absent or empty key keeps it.
fn set_bundle(
    authority: &DynamicCa,
    data: &BTreeMap<String, String>,
    key: &'static str,
) -> Result<(), ConfigMapError> {
    let Some(pem) = data.get(key).filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    match authority.set_pem(pem.as_bytes()) {
        Ok(true) => {
            tracing::info!("loaded {key} of configmap/{NAME}");
            Ok(())
        }
        Ok(false) => Ok(()),
        Err(source) => Err(ConfigMapError::Bundle { key, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn authority_pem(name: &str) -> String {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        params
            .self_signed(&rcgen::KeyPair::generate().unwrap())
            .unwrap()
            .pem()
    }

    /// A client that is never called: `apply` does not touch the API server.
    fn offline_client() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    #[test]
    fn the_settings_are_json_string_arrays() {
        let config = request_header_config(&data(&[
            (ALLOWED_NAMES_KEY, r#"["front-proxy-client"]"#),
            (USERNAME_HEADERS_KEY, r#"["X-Remote-User"]"#),
            (GROUP_HEADERS_KEY, r#"["X-Remote-Group"]"#),
            (EXTRA_HEADERS_PREFIX_KEY, r#"["X-Remote-Extra-"]"#),
        ]))
        .unwrap();
        assert_eq!(config.allowed_names, ["front-proxy-client"]);
        assert_eq!(config.username_headers, ["X-Remote-User"]);
        assert_eq!(config.group_headers, ["X-Remote-Group"]);
        assert_eq!(config.extra_headers_prefixes, ["X-Remote-Extra-"]);
        let empty = request_header_config(&data(&[(ALLOWED_NAMES_KEY, "")])).unwrap();
        assert_eq!(empty, no_request_headers(), "absent and empty keys are no values");
        let err = request_header_config(&data(&[(USERNAME_HEADERS_KEY, "X-Remote-User")])).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "key requestheader-username-headers of configmap/extension-apiserver-authentication"
            ),
            "{err}"
        );
    }

    #[tokio::test]
    async fn apply_fills_what_it_feeds_and_keeps_it_on_bad_content() {
        let fed = ConfigMapAuthentication {
            client: offline_client(),
            client_ca: Some(DynamicCa::pushed(CLIENT_CA_KEY)),
            request_header: Some(RequestHeaderTrust {
                authority: DynamicCa::pushed(REQUEST_HEADER_CA_KEY),
                config: Arc::new(RwLock::new(no_request_headers())),
            }),
        };
        let configmap = |pairs: &[(&str, &str)]| ConfigMap {
            data: Some(data(pairs)),
            ..ConfigMap::default()
        };
        let client_ca = authority_pem("client");
        let proxy_ca = authority_pem("proxy");
        fed.apply(&configmap(&[
            (CLIENT_CA_KEY, &client_ca),
            (REQUEST_HEADER_CA_KEY, &proxy_ca),
            (USERNAME_HEADERS_KEY, r#"["X-Remote-User"]"#),
        ]))
        .unwrap();
        let client = fed.client_ca().unwrap();
        let proxy = fed.request_header().unwrap();
        assert!(client.current().is_some() && proxy.authority.current().is_some());
        assert_eq!(proxy.config.read().username_headers, ["X-Remote-User"]);
        let generations = (client.generation(), proxy.authority.generation());

        let err = fed
            .apply(&configmap(&[
                (CLIENT_CA_KEY, "not PEM"),
                (USERNAME_HEADERS_KEY, "[not json"),
            ]))
            .unwrap_err();
        assert!(
            matches!(
                err,
                ConfigMapError::Bundle {
                    key: CLIENT_CA_KEY,
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!((client.generation(), proxy.authority.generation()), generations);
        assert_eq!(proxy.config.read().username_headers, ["X-Remote-User"]);

        let rotated = authority_pem("client, rotated");
        fed.apply(&configmap(&[(CLIENT_CA_KEY, &rotated)])).unwrap();
        assert_ne!(client.generation(), generations.0, "a rotated CA is taken");
        assert_eq!(
            proxy.authority.generation(),
            generations.1,
            "an absent key keeps its bundle"
        );
    }

    #[tokio::test]
    async fn a_failed_first_read_turns_front_proxy_authentication_off_only() {
        // Nothing listens on port 9 of the loopback: the read fails at once.
        let loaded = ConfigMapAuthentication::load(offline_client(), true, true).await;
        assert!(loaded.request_header().is_none());
        let client_ca = loaded.client_ca().unwrap();
        assert!(client_ca.current().is_none(), "the watch may still bring it");
        let without = ConfigMapAuthentication::load(offline_client(), false, false).await;
        assert!(without.client_ca().is_none() && without.request_header().is_none());
    }
}
