//! Scheduler extenders over HTTP: upstream's wire types (`k8s.io/kube-scheduler/extender/v1`)
//! and a client per configured extender that implements the framework's
//! [`unisched_framework::extender::Extender`].
//!
//! The framework calls extenders synchronously, from the scheduling thread (filter, prioritize,
//! preempt) or a binding thread (bind), as upstream does. The HTTP exchanges themselves run on a
//! small runtime of their own ([`CallRuntime`]), so the calling thread needs no async context
//! and a slow extender never holds up the API client's runtime; the caller waits for at most
//! the extender's `httpTimeout`.
#![forbid(unsafe_code)]

mod http;
mod tls;
pub mod wire;

use std::{future::Future, sync::Arc, time::Duration};

use unisched_framework::{
    config::Extender as ExtenderConfig,
    extender::{Extender, Extenders},
};

pub use crate::{
    http::{BuildError, CallError, DEFAULT_EXTENDER_TIMEOUT, HttpExtender},
    tls::TlsError,
};

/// Receives every extender call's outcome, for metrics.
pub trait ExtenderObserver: Send + Sync {
    /// A call of `verb` to `extender` (its URL prefix) ended after `elapsed`.
    fn call_finished(&self, extender: &str, verb: &str, success: bool, elapsed: Duration);
}

/// Observes nothing.
#[derive(Debug, Default)]
pub struct NoObserver;

impl ExtenderObserver for NoObserver {
    fn call_finished(&self, _: &str, _: &str, _: bool, _: Duration) {}
}

/// The runtime extender calls run on: one worker thread, which is plenty for calls that wait on
/// the network. Dropped without waiting for calls in flight.
#[derive(Debug)]
pub struct CallRuntime {
    runtime: Option<tokio::runtime::Runtime>,
}

/// Why the extenders' runtime could not start.
#[derive(Debug, thiserror::Error)]
#[error("starting the extenders' runtime")]
pub struct RuntimeError(#[source] std::io::Error);

impl CallRuntime {
    /// Starts the runtime.
    pub fn new() -> Result<Self, RuntimeError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("unisched-extender")
            .enable_all()
            .build()
            .map_err(RuntimeError)?;
        Ok(CallRuntime {
            runtime: Some(runtime),
        })
    }

    /// Runs `call` on the runtime and waits for it on this thread (which may be any thread, in
    /// an async context or not); `None` if the call's task ended without finishing.
    pub fn run<F>(&self, call: F) -> Option<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let runtime = self.runtime.as_ref()?;
        let task = runtime.spawn(call);
        futures::executor::block_on(task).ok()
    }
}

impl Drop for CallRuntime {
    fn drop(&mut self) {
        // Dropping a runtime from an async context would panic; nothing in flight is waited for.
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Why the configured extenders could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ExtendersError {
    /// The runtime.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// One extender.
    #[error("couldn't build extenders")]
    Build(#[from] BuildError),
}

/// An HTTP client for every configured extender, in upstream's call order (ignorable ones
/// last); empty when none is configured (no runtime is started then).
pub fn build_extenders(
    configs: &[ExtenderConfig],
    observer: Arc<dyn ExtenderObserver>,
) -> Result<Extenders, ExtendersError> {
    if configs.is_empty() {
        return Ok(Extenders::default());
    }
    let runtime = Arc::new(CallRuntime::new()?);
    let mut extenders: Vec<Arc<dyn Extender>> = Vec::with_capacity(configs.len());
    for config in configs {
        tracing::debug!(extender = %config.url_prefix, "creating extender");
        extenders.push(Arc::new(HttpExtender::new(
            config,
            runtime.clone(),
            observer.clone(),
        )?));
    }
    Ok(Extenders::new(extenders))
}
