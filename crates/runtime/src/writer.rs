//! The API writer: every write the scheduler makes goes through here.
//!
//! Three rules live in one place so no caller can forget them:
//! - **only the leader writes**: a write attempted without the lease fails with `NotLeader`;
//! - **rate limits**: a token bucket honours `clientConnection.qps`/`burst`, like client-go;
//! - **retries**: 429 and 5xx (and transport errors) are retried with capped exponential backoff;
//!   409 is returned to the caller, who re-reads and recomputes (only it knows how to merge).
//!
//! Writes are patches or subresource POSTs, never a PUT of a typed object: k8s-openapi drops fields
//! it does not know, and a PUT would erase them on the server.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::core::v1::{Binding, ObjectReference, Pod},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use parking_lot::Mutex;
use serde_json::Value;

use crate::Metrics;

/// Whether this replica may write. Cleared the moment the lease is lost.
#[derive(Clone, Debug, Default)]
pub struct LeaderFlag(Arc<AtomicBool>);

impl LeaderFlag {
    /// A flag that starts as `leading`.
    pub fn new(leading: bool) -> Self {
        LeaderFlag(Arc::new(AtomicBool::new(leading)))
    }
    /// True while leading.
    pub fn is_leader(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
    /// Sets the state.
    pub fn set(&self, leading: bool) {
        self.0.store(leading, Ordering::SeqCst);
    }
}

/// A write that did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// This replica does not hold the lease.
    #[error("not the leader: writes are disabled")]
    NotLeader,
    /// 409: the object changed (or, for binding, the pod is already bound). Re-read and retry.
    #[error("conflict: {0}")]
    Conflict(String),
    /// 404: the object is gone.
    #[error("not found: {0}")]
    NotFound(String),
    /// Another API error that retrying will not fix (400, 403, 422, …).
    #[error("API error {code}: {message}")]
    Api {
        /// HTTP status.
        code: u16,
        /// Server message.
        message: String,
    },
    /// Retries ran out on a retryable error.
    #[error("giving up after {attempts} attempts: {last}")]
    Exhausted {
        /// Attempts made.
        attempts: u32,
        /// The last error.
        last: String,
    },
}

impl WriteError {
    /// True for 409.
    pub fn is_conflict(&self) -> bool {
        matches!(self, WriteError::Conflict(_))
    }
}

/// Token bucket: `qps` tokens per second, up to `burst` stored. `qps <= 0` disables limiting.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(qps: f32, burst: i32) -> Self {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            qps: f64::from(qps),
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// How long to wait before one token is available; takes it.
    pub fn reserve(&self) -> Duration {
        if self.qps <= 0.0 {
            return Duration::ZERO;
        }
        let mut st = self.state.lock();
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(st.1).as_secs_f64();
        st.0 = (st.0 + elapsed * self.qps).min(self.burst);
        st.1 = now;
        st.0 -= 1.0;
        if st.0 >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-st.0 / self.qps)
        }
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        let wait = self.reserve();
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

/// Retry settings for retryable failures.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// Attempts in total.
    pub attempts: u32,
    /// First backoff.
    pub initial: Duration,
    /// Backoff cap.
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 8,
            initial: Duration::from_millis(50),
            max: Duration::from_secs(5),
        }
    }
}

/// Classifies a kube error: `Ok(code)` for API errors, `Err(text)` for transport errors.
fn classify(err: &kube::Error) -> Result<u16, String> {
    match err {
        kube::Error::Api(s) => Ok(s.code),
        other => Err(other.to_string()),
    }
}

fn api_message(err: &kube::Error) -> String {
    match err {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// Writes to the API server on behalf of the scheduler.
#[derive(Clone)]
pub struct ApiWriter {
    client: Client,
    limiter: Arc<TokenBucket>,
    metrics: Metrics,
    leader: LeaderFlag,
    retry: RetryPolicy,
    field_manager: String,
}

impl std::fmt::Debug for ApiWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiWriter")
            .field("field_manager", &self.field_manager)
            .finish()
    }
}

impl ApiWriter {
    /// A writer with the given limits.
    pub fn new(client: Client, qps: f32, burst: i32, metrics: Metrics, leader: LeaderFlag) -> Self {
        ApiWriter {
            client,
            limiter: Arc::new(TokenBucket::new(qps, burst)),
            metrics,
            leader,
            retry: RetryPolicy::default(),
            field_manager: "unisched".into(),
        }
    }

    /// Overrides the retry policy (tests use short backoffs).
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The client (reads).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The leader flag this writer checks.
    pub fn leader(&self) -> &LeaderFlag {
        &self.leader
    }

    /// Runs one logical write with leader check, rate limit, retries and metrics.
    pub async fn write<T, F, Fut>(&self, verb: &str, resource: &str, mut op: F) -> Result<T, WriteError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        let start = Instant::now();
        let mut backoff = self.retry.initial;
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts.max(1) {
            if !self.leader.is_leader() {
                return Err(WriteError::NotLeader);
            }
            self.limiter.acquire().await;
            let result = op().await;
            let code = match &result {
                Ok(_) => "2xx".to_string(),
                Err(e) => classify(e).map_or_else(|_| "transport".to_string(), |c| c.to_string()),
            };
            self.metrics
                .api_writes
                .with_label_values(&[verb, resource, &code])
                .inc();
            match result {
                Ok(v) => {
                    self.metrics
                        .api_write_duration
                        .with_label_values(&[verb, resource])
                        .observe(start.elapsed().as_secs_f64());
                    return Ok(v);
                }
                Err(e) => {
                    let retryable = match classify(&e) {
                        Ok(409) => return Err(WriteError::Conflict(api_message(&e))),
                        Ok(404) => return Err(WriteError::NotFound(api_message(&e))),
                        Ok(c) => c == 429 || c >= 500,
                        Err(_) => true,
                    };
                    if !retryable {
                        let code = classify(&e).unwrap_or(0);
                        return Err(WriteError::Api {
                            code,
                            message: api_message(&e),
                        });
                    }
                    last = e.to_string();
                    tracing::debug!(verb, resource, attempt, error = %last, "retrying API write");
                    if attempt < self.retry.attempts {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(self.retry.max);
                    }
                }
            }
        }
        Err(WriteError::Exhausted {
            attempts: self.retry.attempts,
            last,
        })
    }

    /// POSTs `pods/binding`, with the pod UID as precondition so a recreated pod is not bound.
    pub async fn bind(&self, namespace: &str, name: &str, uid: &str, node: &str) -> Result<(), WriteError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some(namespace.to_string()),
                uid: (!uid.is_empty()).then(|| uid.to_string()),
                ..Default::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.to_string()),
                ..Default::default()
            },
        };
        self.write("create", "pods/binding", || {
            let api = api.clone();
            let binding = binding.clone();
            async move {
                api.create_subresource::<Binding, Value>("binding", name, &PostParams::default(), &binding)
                    .await
            }
        })
        .await
        .map(|_| ())
    }

    /// Strategic-merge-patches a pod's status (conditions merge by `type`).
    pub async fn patch_pod_status(
        &self,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> Result<(), WriteError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pp = PatchParams::default();
        self.write("patch", "pods/status", || {
            let api = api.clone();
            let patch = patch.clone();
            let pp = pp.clone();
            async move { api.patch_status(name, &pp, &Patch::Strategic(patch)).await }
        })
        .await
        .map(|_| ())
    }

    /// Merge-patches any namespaced object's subresource (`status`) or the object itself (`None`),
    /// through a dynamic API so unknown fields are never re-serialised.
    pub async fn merge_patch(
        &self,
        resource: &kube::discovery::ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        patch: Value,
    ) -> Result<Value, WriteError> {
        let api: Api<kube::api::DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        };
        let label = match subresource {
            Some(s) => format!("{}/{s}", resource.plural),
            None => resource.plural.clone(),
        };
        let pp = PatchParams::default();
        self.write("patch", &label, || {
            let api = api.clone();
            let patch = patch.clone();
            let pp = pp.clone();
            async move {
                let obj = match subresource {
                    Some(s) => api.patch_subresource(s, name, &pp, &Patch::Merge(patch)).await?,
                    None => api.patch(name, &pp, &Patch::Merge(patch)).await?,
                };
                serde_json::to_value(obj).map_err(kube::Error::SerdeError)
            }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_bucket_burst_then_rate() {
        let b = TokenBucket::new(10.0, 3);
        for _ in 0..3 {
            assert_eq!(b.reserve(), Duration::ZERO);
        }
        let w = b.reserve();
        assert!(
            w > Duration::from_millis(50) && w <= Duration::from_millis(100),
            "{w:?}"
        );
        let unlimited = TokenBucket::new(-1.0, 0);
        for _ in 0..1000 {
            assert_eq!(unlimited.reserve(), Duration::ZERO);
        }
    }
}
