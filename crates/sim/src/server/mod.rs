//! The HTTP front end: an axum server speaking the Kubernetes REST and watch protocol over the store.

mod discovery;
mod faults;
mod handlers;
mod openapi;
mod protobuf;
mod reviews;
mod table;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio::task::JoinHandle;

pub use discovery::{KUBE_MAJOR, KUBE_MINOR};
pub use faults::Faults;

use crate::auth::TokenAuthority;
use crate::controllers::{self, ControllerConfig, JobControllerConfig, KubeletConfig};
use crate::registry::Registry;
use crate::store::{Store, StoreConfig};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The listening socket could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The bound socket has no local address (should not happen).
    #[error("cannot read the local address: {0}")]
    LocalAddr(std::io::Error),
}

/// Server settings (see [`ApiServerBuilder`]).
#[derive(Clone, Debug)]
pub(crate) struct ServerConfig {
    pub(crate) bookmark_interval: Duration,
    pub(crate) watch_timeout: Duration,
}

/// Configures an [`ApiServer`].
#[derive(Clone, Debug)]
pub struct ApiServerBuilder {
    store: StoreConfig,
    registry: Option<Registry>,
    server: ServerConfig,
    controllers: ControllerConfig,
}

impl Default for ApiServerBuilder {
    fn default() -> Self {
        Self {
            store: StoreConfig::default(),
            registry: None,
            server: ServerConfig {
                bookmark_interval: Duration::from_secs(10),
                watch_timeout: Duration::from_secs(1800),
            },
            controllers: ControllerConfig::default(),
        }
    }
}

impl ApiServerBuilder {
    /// How many events are kept for watch resumption and paging (default 100 000). Older
    /// resourceVersions get 410 Gone.
    pub fn history(mut self, events: usize) -> Self {
        self.store.history = events;
        self
    }

    /// Whether namespaced objects need their namespace to exist (default true).
    pub fn require_namespaces(mut self, yes: bool) -> Self {
        self.store.require_namespaces = yes;
        self
    }

    /// Serve another set of resources than [`Registry::default`].
    pub fn registry(mut self, registry: Registry) -> Self {
        self.registry = Some(registry);
        self
    }

    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK (default 10 s).
    pub fn bookmark_interval(mut self, every: Duration) -> Self {
        self.server.bookmark_interval = every;
        self
    }

    /// How long a watch without `timeoutSeconds` lasts (default 30 min).
    pub fn watch_timeout(mut self, timeout: Duration) -> Self {
        self.server.watch_timeout = timeout;
        self
    }

    /// Run the garbage collector (default true).
    pub fn garbage_collector(mut self, yes: bool) -> Self {
        self.controllers.garbage_collector = yes;
        self
    }

    /// Run the ResourceClaim controller (default true).
    pub fn claim_controller(mut self, yes: bool) -> Self {
        self.controllers.claim_controller = yes;
        self
    }

    /// Run the PersistentVolume controller and provisioner (default true).
    pub fn volume_controller(mut self, yes: bool) -> Self {
        self.controllers.volume_controller = yes;
        self
    }

    /// Run the fake kubelet with this configuration, or not at all with `None` (default: on).
    pub fn kubelet(mut self, config: Option<KubeletConfig>) -> Self {
        self.controllers.kubelet = config;
        self
    }

    /// Run the Job controller with this configuration, or not at all with `None` (default: on, with
    /// `WorkloadWithJob`).
    pub fn job_controller(mut self, config: Option<JobControllerConfig>) -> Self {
        self.controllers.job_controller = config;
        self
    }

    /// Mirror `events.k8s.io/v1` Events into core `v1` Events (default true).
    pub fn event_mirror(mut self, yes: bool) -> Self {
        self.controllers.event_mirror = yes;
        self
    }

    /// Turns every controller on or off.
    pub fn controllers(mut self, yes: bool) -> Self {
        self.controllers.event_mirror = yes;
        self.controllers.garbage_collector = yes;
        self.controllers.claim_controller = yes;
        self.controllers.volume_controller = yes;
        self.controllers.kubelet = if yes {
            Some(self.controllers.kubelet.unwrap_or_default())
        } else {
            None
        };
        self.controllers.job_controller = if yes {
            Some(self.controllers.job_controller.unwrap_or_default())
        } else {
            None
        };
        self
    }

    /// Builds the server and its store (nothing runs until [`ApiServer::serve`]).
    pub fn build(self) -> ApiServer {
        let store = Store::new(self.registry.unwrap_or_default(), self.store);
        ApiServer {
            store,
            config: self.server,
            controllers: self.controllers,
            faults: Faults::default(),
            tokens: TokenAuthority::default(),
        }
    }
}

/// The simulated API server: a store plus its HTTP front end and controllers.
#[derive(Clone, Debug)]
pub struct ApiServer {
    store: Store,
    config: ServerConfig,
    controllers: ControllerConfig,
    faults: Faults,
    tokens: TokenAuthority,
}

impl Default for ApiServer {
    fn default() -> Self {
        ApiServerBuilder::default().build()
    }
}

impl ApiServer {
    /// A builder with the defaults.
    pub fn builder() -> ApiServerBuilder {
        ApiServerBuilder::default()
    }

    /// The store (usable before and after serving).
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Fault injection switches (tests).
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The ServiceAccount tokens this server issued (through `TokenRequest` or
    /// [`TokenAuthority::issue`]) and accepts in `TokenReview`s.
    pub fn tokens(&self) -> &TokenAuthority {
        &self.tokens
    }

    /// The axum router, for embedding in another server. Watches served by it end when `shutdown`
    /// changes or its sender is dropped.
    pub fn router(&self, server_address: String, shutdown: tokio::sync::watch::Receiver<bool>) -> Router {
        let state = Arc::new(handlers::AppState {
            store: self.store.clone(),
            config: self.config.clone(),
            shutdown,
            server_address,
            faults: self.faults.clone(),
            openapi: openapi::Cache::default(),
            tokens: self.tokens.clone(),
        });
        Router::new()
            .fallback(handlers::dispatch)
            .with_state(state)
            .layer(DefaultBodyLimit::max(3 * 1024 * 1024 + 512 * 1024))
    }

    /// Listens on `addr` (use `127.0.0.1:0` for a free port), serves HTTP and starts the controllers.
    pub async fn serve(self, addr: SocketAddr) -> Result<RunningServer, ServerError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        let local = listener.local_addr().map_err(ServerError::LocalAddr)?;
        let (tx, rx) = tokio::sync::watch::channel(false);
        let router = self.router(local.to_string(), rx.clone());
        let mut signal = rx.clone();
        let server = tokio::spawn(async move {
            // Watch events are small writes: without TCP_NODELAY, Nagle's algorithm can hold them back.
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "could not set TCP_NODELAY");
                }
            });
            axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = signal.changed().await;
                })
                .await
        });
        let controllers = controllers::spawn(&self.store, &self.controllers, rx);
        tracing::info!(%local, "unisched-sim API server listening");
        Ok(RunningServer {
            addr: local,
            faults: self.faults,
            store: self.store,
            shutdown: tx,
            server: Some(server),
            controllers,
        })
    }
}

/// A serving [`ApiServer`]. Dropping it stops it (without waiting); prefer [`RunningServer::shutdown`].
#[derive(Debug)]
pub struct RunningServer {
    /// The address it listens on.
    pub addr: SocketAddr,
    store: Store,
    faults: Faults,
    shutdown: tokio::sync::watch::Sender<bool>,
    server: Option<JoinHandle<std::io::Result<()>>>,
    controllers: Vec<JoinHandle<()>>,
}

impl RunningServer {
    /// The store behind the server, for in-process access.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Fault injection switches (tests): fail requests, drop watches.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// `http://ADDR`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig for this server (see [`kubeconfig_yaml`]).
    pub fn kubeconfig(&self) -> String {
        kubeconfig_yaml(self.addr)
    }

    /// Stops the controllers, ends open watches, and waits (at most 5 s) for the HTTP server to finish.
    pub async fn shutdown(mut self) {
        let _ = self.shutdown.send(true);
        for c in self.controllers.drain(..) {
            c.abort();
        }
        if let Some(server) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        for c in &self.controllers {
            c.abort();
        }
        if let Some(s) = &self.server {
            s.abort();
        }
    }
}

/// A kubeconfig with one cluster at `http://ADDR`, no authentication, namespace `default`.
pub fn kubeconfig_yaml(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: unisched-sim\n  cluster:\n    server: http://{addr}\n\
         contexts:\n\
         - name: unisched-sim\n  context:\n    cluster: unisched-sim\n    user: unisched-sim\n    namespace: default\n\
         current-context: unisched-sim\n\
         users:\n\
         - name: unisched-sim\n  user: {{}}\n\
         preferences: {{}}\n"
    )
}
