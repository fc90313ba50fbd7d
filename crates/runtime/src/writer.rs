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
    Api, Client, Resource,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use parking_lot::Mutex;
use serde::Deserialize;
use serde_json::Value;

use crate::{lean::Lean, metrics::Metrics};

/// The media type asking the API server to answer with the object's metadata only
/// (`meta.k8s.io/v1` `PartialObjectMetadata`), as client-go's metadata client does.
pub const METADATA_ONLY: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// The part of a metadata-only reply that is kept.
#[derive(Deserialize)]
struct MetadataReply {
    #[serde(default)]
    metadata: ObjectMeta,
}

/// Patches an object of kind `K` (or its `subresource`) and returns the server's metadata of the
/// result, without `managedFields`.
///
/// Why: the reply to a write is the whole object, and a scheduler write is usually followed by
/// nothing but a look at the new `resourceVersion`. A claim's reply carries its spec, allocation
/// and managed fields; decoding those was a tenth of the scheduler's CPU on the real control plane
/// in the DRA benchmark. A caller that conditioned its patch on a `resourceVersion` knows
/// the rest of the result: its own copy with the patch applied.
pub async fn patch_for_metadata<K: Resource<DynamicType = ()>>(
    client: &Client,
    namespace: Option<&str>,
    name: &str,
    subresource: Option<&str>,
    patch: &Patch<Value>,
) -> Result<ObjectMeta, kube::Error> {
    let request = kube::core::Request::new(K::url_path(&(), namespace));
    let pp = PatchParams::default();
    let req = match subresource {
        Some(sub) => request.patch_subresource(sub, name, &pp, patch),
        None => request.patch(name, &pp, patch),
    }
    .map_err(kube::Error::BuildRequest)?;
    send_for_metadata(client, req).await
}

/// Creates `object` (of kind `K`) and returns the server's metadata of it, without
/// `managedFields`: the create counterpart of [`patch_for_metadata`], for writers that read
/// nothing of the reply (events).
pub async fn create_for_metadata<K: Resource<DynamicType = ()> + serde::Serialize>(
    client: &Client,
    namespace: Option<&str>,
    object: &K,
) -> Result<ObjectMeta, kube::Error> {
    let body = serde_json::to_vec(object).map_err(kube::Error::SerdeError)?;
    let req = kube::core::Request::new(K::url_path(&(), namespace))
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    send_for_metadata(client, req).await
}

/// Deletes an object of kind `K` and returns the server's metadata of what it answered with
/// (the object being deleted, or the deleted object), without `managedFields`: the delete
/// counterpart of [`patch_for_metadata`]. A preemption deletes about ten victims per preemptor, and
/// nothing in the reply is read but success.
pub async fn delete_for_metadata<K: Resource<DynamicType = ()>>(
    client: &Client,
    namespace: Option<&str>,
    name: &str,
    params: &DeleteParams,
) -> Result<ObjectMeta, kube::Error> {
    let req = kube::core::Request::new(K::url_path(&(), namespace))
        .delete(name, params)
        .map_err(kube::Error::BuildRequest)?;
    send_for_metadata(client, req).await
}

/// Sends `req` asking for a metadata-only reply, and decodes that.
async fn send_for_metadata(
    client: &Client,
    mut req: http::Request<Vec<u8>>,
) -> Result<ObjectMeta, kube::Error> {
    req.headers_mut().insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static(METADATA_ONLY),
    );
    let reply: Lean<MetadataReply> = client.request(req).await?;
    Ok(reply.0.metadata)
}

/// Whether this replica may write. Cleared the moment the lease is lost.
///
/// Besides the flag it holds a **fencing deadline**: the instant (by this process's monotonic
/// clock) after which the last successful lease renewal no longer covers a write. A leader that was
/// paused (SIGSTOP, a stalled VM, a starved runtime) wakes up with the flag still set, but the
/// deadline has passed, so [`LeaderFlag::is_leader`] is false before the renew loop even runs
/// again. Without leader election there is no deadline.
#[derive(Clone, Debug)]
pub struct LeaderFlag(Arc<LeaderState>);

#[derive(Debug)]
struct LeaderState {
    leading: AtomicBool,
    /// Until when the last renewal covers writes; `None` = no fence (no leader election).
    fence: Mutex<Option<Instant>>,
}

impl Default for LeaderFlag {
    fn default() -> Self {
        LeaderFlag::new(false)
    }
}

impl LeaderFlag {
    /// A flag that starts as `leading`, with no fencing deadline.
    pub fn new(leading: bool) -> Self {
        LeaderFlag(Arc::new(LeaderState {
            leading: AtomicBool::new(leading),
            fence: Mutex::new(None),
        }))
    }
    /// True while leading and, when fenced, before the fencing deadline.
    pub fn is_leader(&self) -> bool {
        self.0.leading.load(Ordering::SeqCst) && self.0.fence.lock().is_none_or(|f| Instant::now() < f)
    }
    /// Sets the state.
    pub fn set(&self, leading: bool) {
        self.0.leading.store(leading, Ordering::SeqCst);
    }
    /// Records a successful renewal whose request left at `sent`: writes are covered until
    /// `sent + valid_for`. Use the instant the request was *sent* (the server may have committed
    /// it any time after), never when the answer arrived.
    pub fn renewed(&self, sent: Instant, valid_for: Duration) {
        *self.0.fence.lock() = Some(sent.checked_add(valid_for).unwrap_or(sent));
        self.set(true);
    }
    /// The fencing deadline, if there is one.
    pub fn fenced_until(&self) -> Option<Instant> {
        *self.0.fence.lock()
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
    /// An earlier attempt failed in a way that leaves its outcome unknown (a 5xx or a dropped
    /// connection: the server may have committed it), and a later attempt was refused with 409 or
    /// 404, possibly *because* the earlier one was applied. Resolve by reading, never by undoing.
    #[error("outcome unknown: {0}")]
    Unknown(String),
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

    /// True when the write may or may not have been applied: the caller must read to find out.
    pub fn outcome_unknown(&self) -> bool {
        matches!(self, WriteError::Unknown(_) | WriteError::Exhausted { .. })
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

/// The HTTP status of an API error; `None` for a transport error (no answer to classify).
fn status_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
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
    /// Shared by every copy, whichever client it sends through (see [`ApiWriter::with_client`]).
    limits: Arc<WriterLimits>,
}

/// At most this many writes on the wire at once, over every connection of the writer.
///
/// The client speaks HTTP/1.1 (kube-rs offers no HTTP/2), so each request in flight holds a
/// connection of its own, and the connection pool opens a new one whenever none is idle. A gang
/// of 1,000 members reaching its binding cycles together would open 1,000 TLS connections, each
/// a handshake with a client-certificate signature: profiles of the real-control-plane gang
/// workloads put the handshakes at about a tenth of the scheduler's CPU. Bounded, the pool keeps
/// this many warm connections and reuses them; kube-scheduler gets the same effect from one
/// multiplexed HTTP/2 connection.
pub const MAX_WRITES_IN_FLIGHT: usize = 128;

/// What an [`ApiWriter`]'s copies share.
#[derive(Clone)]
struct WriterLimits {
    /// Shared with copies whose retry policy differs (see [`ApiWriter::with_retry`]).
    limiter: Arc<TokenBucket>,
    /// Writes on the wire ([`MAX_WRITES_IN_FLIGHT`]).
    in_flight: Arc<tokio::sync::Semaphore>,
    metrics: Metrics,
    leader: LeaderFlag,
    retry: RetryPolicy,
    field_manager: String,
}

impl std::fmt::Debug for ApiWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiWriter")
            .field("field_manager", &self.limits.field_manager)
            .finish()
    }
}

impl ApiWriter {
    /// A writer with the given limits.
    pub fn new(client: Client, qps: f32, burst: i32, metrics: Metrics, leader: LeaderFlag) -> Self {
        ApiWriter {
            client,
            limits: Arc::new(WriterLimits {
                limiter: Arc::new(TokenBucket::new(qps, burst)),
                in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_WRITES_IN_FLIGHT)),
                metrics,
                leader,
                retry: RetryPolicy::default(),
                field_manager: "unisched".into(),
            }),
        }
    }

    /// Overrides the retry policy (tests use short backoffs).
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        let mut limits = (*self.limits).clone();
        limits.retry = retry;
        self.limits = Arc::new(limits);
        self
    }

    /// This writer sending through `client` instead: same token bucket, leader fence, retry
    /// policy and metrics (a binding thread's own connection, see `SyncWriter`).
    #[must_use]
    pub fn with_client(&self, client: Client) -> Self {
        ApiWriter {
            client,
            limits: self.limits.clone(),
        }
    }

    /// The client (reads).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The leader flag this writer checks.
    pub fn leader(&self) -> &LeaderFlag {
        &self.limits.leader
    }

    /// Runs one logical write with leader check, rate limit, retries and metrics.
    pub async fn write<T, F, Fut>(&self, verb: &str, resource: &str, mut op: F) -> Result<T, WriteError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        let start = Instant::now();
        let mut backoff = self.limits.retry.initial;
        let mut last = String::new();
        // Set once an attempt failed after the request may have reached the server.
        let mut ambiguous = false;
        for attempt in 1..=self.limits.retry.attempts.max(1) {
            if !self.limits.leader.is_leader() {
                return Err(WriteError::NotLeader);
            }
            self.limits.limiter.acquire().await;
            // The wait for a token may have outlived the lease: check again right before sending.
            if !self.limits.leader.is_leader() {
                return Err(WriteError::NotLeader);
            }
            let result = {
                // Never closed, so a permit always comes; without one the write goes anyway.
                let _on_the_wire = self.limits.in_flight.acquire().await.ok();
                op().await
            };
            let code = match &result {
                Ok(_) => "2xx".to_string(),
                Err(e) => status_code(e).map_or_else(|| "transport".to_string(), |c| c.to_string()),
            };
            self.limits
                .metrics
                .api_writes
                .with_label_values(&[verb, resource, &code])
                .inc();
            match result {
                Ok(v) => {
                    self.limits
                        .metrics
                        .api_write_duration
                        .with_label_values(&[verb, resource])
                        .observe(start.elapsed().as_secs_f64());
                    return Ok(v);
                }
                Err(e) => {
                    let retryable = match status_code(&e) {
                        Some(409) if ambiguous => return Err(WriteError::Unknown(api_message(&e))),
                        Some(404) if ambiguous => return Err(WriteError::Unknown(api_message(&e))),
                        Some(409) => return Err(WriteError::Conflict(api_message(&e))),
                        Some(404) => return Err(WriteError::NotFound(api_message(&e))),
                        Some(c) => c == 429 || c >= 500,
                        None => true,
                    };
                    if !retryable {
                        let code = status_code(&e).unwrap_or(0);
                        return Err(WriteError::Api {
                            code,
                            message: api_message(&e),
                        });
                    }
                    // 429 means "not applied"; a 5xx or a transport error may follow a commit.
                    ambiguous |= status_code(&e).is_none_or(|c| c >= 500);
                    last = e.to_string();
                    tracing::debug!(verb, resource, attempt, error = %last, "retrying API write");
                    if attempt < self.limits.retry.attempts {
                        if !self.limits.leader.is_leader() {
                            return Err(WriteError::NotLeader);
                        }
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(self.limits.retry.max);
                    }
                }
            }
        }
        Err(WriteError::Exhausted {
            attempts: self.limits.retry.attempts,
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
        let result = self
            .write("create", "pods/binding", || {
                let api = api.clone();
                let binding = binding.clone();
                async move {
                    api.create_subresource::<Binding, Value>(
                        "binding",
                        name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await
                }
            })
            .await
            .map(|_| ());
        match result {
            Err(e) if e.outcome_unknown() || e.is_conflict() => {
                self.resolve_binding(&api, name, uid, node, e).await
            }
            other => other,
        }
    }

    /// After a binding whose answer was lost (or a 409 that may be our own earlier attempt), reads
    /// the pod: bound to `node` is success; bound elsewhere is a conflict; unbound means the binding
    /// was not applied, so `err` stands. When even the reads fail the outcome stays unknown.
    async fn resolve_binding(
        &self,
        api: &Api<Pod>,
        name: &str,
        uid: &str,
        node: &str,
        err: WriteError,
    ) -> Result<(), WriteError> {
        let mut backoff = self.limits.retry.initial;
        let mut last = err.to_string();
        for attempt in 1..=self.limits.retry.attempts.max(1) {
            match api.get_opt(name).await {
                Ok(None) => return Err(WriteError::NotFound(format!("pod {name} is gone"))),
                Ok(Some(pod)) => {
                    if !uid.is_empty() && pod.metadata.uid.as_deref() != Some(uid) {
                        return Err(WriteError::NotFound(format!("pod {name} was recreated")));
                    }
                    let bound_to = pod.spec.and_then(|s| s.node_name).unwrap_or_default();
                    return if bound_to == node {
                        tracing::debug!(pod = name, node, "binding outcome resolved by reading: bound");
                        Ok(())
                    } else if !bound_to.is_empty() {
                        Err(WriteError::Conflict(format!(
                            "pod {name} is already bound to node {bound_to:?}, not {node:?}"
                        )))
                    } else if matches!(err, WriteError::Unknown(_)) {
                        // The earlier attempt was not applied after all; the 409/404 was real.
                        Err(WriteError::Conflict(last))
                    } else {
                        Err(err)
                    };
                }
                Err(e) => {
                    last = e.to_string();
                    if attempt < self.limits.retry.attempts {
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(self.limits.retry.max);
                    }
                }
            }
        }
        Err(WriteError::Unknown(format!(
            "binding of {name} to {node}: cannot read the pod back: {last}"
        )))
    }

    /// Strategic-merge-patches a pod's status (conditions merge by `type`); the reply, read for
    /// nothing but success, carries only metadata.
    pub async fn patch_pod_status(
        &self,
        namespace: &str,
        name: &str,
        patch: Value,
    ) -> Result<(), WriteError> {
        let patch = Patch::Strategic(patch);
        self.write("patch", "pods/status", || {
            patch_for_metadata::<Pod>(&self.client, Some(namespace), name, Some("status"), &patch)
        })
        .await
        .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use super::*;

    fn writer(qps: f32, burst: i32, leader: LeaderFlag) -> ApiWriter {
        // Nothing is sent: the operations below only count how often they are called.
        let client = Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap())).unwrap();
        ApiWriter::new(client, qps, burst, Metrics::new().unwrap(), leader)
    }

    async fn counted_write(w: &ApiWriter, calls: &Arc<AtomicU32>) -> Result<(), WriteError> {
        w.write("patch", "pods/status", || {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok::<(), kube::Error>(())
            }
        })
        .await
    }

    #[test]
    fn fencing_deadline_ends_leadership_without_the_renew_loop() {
        let flag = LeaderFlag::new(false);
        assert!(!flag.is_leader());
        flag.renewed(Instant::now(), Duration::from_millis(40));
        assert!(flag.is_leader());
        // The renew loop stalls (a paused process): nobody clears the flag, the deadline does.
        std::thread::sleep(Duration::from_millis(60));
        assert!(!flag.is_leader(), "leadership must lapse at the fencing deadline");
        flag.renewed(Instant::now(), Duration::from_secs(5));
        assert!(flag.is_leader());
        flag.set(false);
        assert!(!flag.is_leader());
        // Without leader election there is no deadline.
        let unfenced = LeaderFlag::new(true);
        assert!(unfenced.is_leader() && unfenced.fenced_until().is_none());
    }

    /// A burst of writes (a gang's bindings) is sent at most `MAX_WRITES_IN_FLIGHT` at a time,
    /// and every one of them is sent; copies of the writer (another connection) share the bound.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_in_flight_are_bounded_and_all_go_out() {
        let w = writer(-1.0, 0, LeaderFlag::new(true));
        let copy = w.with_client(w.client().clone());
        let now = Arc::new(AtomicU32::new(0));
        let most = Arc::new(AtomicU32::new(0));
        let done = Arc::new(AtomicU32::new(0));
        let writes = (0..200).map(|i| {
            let w = if i % 2 == 0 { w.clone() } else { copy.clone() };
            let (now, most, done) = (now.clone(), most.clone(), done.clone());
            tokio::spawn(async move {
                w.write("create", "pods/binding", || {
                    let (now, most, done) = (now.clone(), most.clone(), done.clone());
                    async move {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        now.fetch_sub(1, Ordering::SeqCst);
                        done.fetch_add(1, Ordering::SeqCst);
                        Ok::<(), kube::Error>(())
                    }
                })
                .await
            })
        });
        for r in futures::future::join_all(writes).await {
            assert!(r.unwrap().is_ok());
        }
        assert_eq!(done.load(Ordering::SeqCst), 200);
        let most = most.load(Ordering::SeqCst);
        assert!(
            most <= MAX_WRITES_IN_FLIGHT as u32,
            "{most} writes were in flight at once"
        );
        assert!(most > 1, "writes still go out concurrently ({most})");
    }

    #[tokio::test]
    async fn a_stalled_leader_sends_no_write() {
        // Last renewal sent 2 s ago, covering 1 s: the process was paused in between.
        let flag = LeaderFlag::new(false);
        flag.renewed(Instant::now() - Duration::from_secs(2), Duration::from_secs(1));
        let w = writer(-1.0, 0, flag.clone());
        let calls = Arc::new(AtomicU32::new(0));
        for _ in 0..50 {
            assert!(matches!(
                counted_write(&w, &calls).await,
                Err(WriteError::NotLeader)
            ));
        }
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "no request may leave a fenced leader"
        );
        // Renewed again: writes flow.
        flag.renewed(Instant::now(), Duration::from_secs(10));
        counted_write(&w, &calls).await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn the_fence_is_checked_again_after_waiting_for_a_token() {
        // One token per second; the lease covers 300 ms. The second write waits ~1 s for its token
        // and must find the deadline passed when it is about to send.
        let flag = LeaderFlag::new(false);
        flag.renewed(Instant::now(), Duration::from_millis(300));
        let w = writer(1.0, 1, flag);
        let calls = Arc::new(AtomicU32::new(0));
        counted_write(&w, &calls).await.unwrap();
        assert!(matches!(
            counted_write(&w, &calls).await,
            Err(WriteError::NotLeader)
        ));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

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
