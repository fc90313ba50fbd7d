//! `/metrics`, `/healthz`, `/livez`, `/readyz` and `/configz`.
//!
//! `/readyz` answers 200 only after every watch finished its initial list and the caches were
//! filled (upstream's `sched-handler-sync` check): a replica that schedules from a half-filled
//! cache would overcommit nodes. `/healthz` and `/livez` fail once the process has decided to exit
//! (lease lost), so a kubelet restarts it promptly.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};

use crate::Metrics;

/// Health state shared with the HTTP handlers.
#[derive(Clone, Debug, Default)]
pub struct Health {
    synced: Arc<AtomicBool>,
    dying: Arc<AtomicBool>,
}

impl Health {
    /// Marks the initial sync done.
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }
    /// True after the initial sync.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }
    /// Marks the process as exiting.
    pub fn set_dying(&self) {
        self.dying.store(true, Ordering::SeqCst);
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    health: Health,
    configz: Arc<String>,
}

/// The router (exposed for tests).
pub fn router(metrics: Metrics, health: Health, configz: String) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(live_handler))
        .route("/livez", get(live_handler))
        .route("/readyz", get(ready_handler))
        .route("/configz", get(configz_handler))
        .with_state(AppState {
            metrics,
            health,
            configz: Arc::new(configz),
        })
}

async fn metrics_handler(State(s): State<AppState>) -> impl IntoResponse {
    ([("content-type", prometheus::TEXT_FORMAT)], s.metrics.render())
}

async fn live_handler(State(s): State<AppState>) -> impl IntoResponse {
    if s.health.dying.load(Ordering::SeqCst) {
        (StatusCode::INTERNAL_SERVER_ERROR, "leaderelection lost\n")
    } else {
        (StatusCode::OK, "ok")
    }
}

async fn ready_handler(State(s): State<AppState>) -> impl IntoResponse {
    if s.health.dying.load(Ordering::SeqCst) {
        (StatusCode::INTERNAL_SERVER_ERROR, "shutting down\n")
    } else if s.health.is_synced() {
        (StatusCode::OK, "ok")
    } else {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "[-]sched-handler-sync failed: waiting for handlers to sync\n",
        )
    }
}

async fn configz_handler(State(s): State<AppState>) -> impl IntoResponse {
    ([("content-type", "application/json")], (*s.configz).clone())
}

/// Serves the endpoints on `addr` until the task is dropped. Returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    health: Health,
    configz: String,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = router(metrics, health, configz);
    let handle = tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "health server stopped");
        }
    });
    Ok((bound, handle))
}
