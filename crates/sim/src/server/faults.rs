//! Fault injection for tests: fail the next requests that match, lose the answer to requests that
//! were applied, answer slowly (a busy API server), or drop every open watch.
//!
//! The runtime's promises (retries on 409/429/5xx, relisting after a dropped watch, resolving a
//! write whose answer was lost by reading instead of undoing) can only be tested against a server
//! that misbehaves on demand. Faults are off unless a test asks for them.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use axum::http::Method;
use parking_lot::Mutex;

/// When a rule's fault is injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Instead of handling the request (nothing is applied).
    Before,
    /// After the request was applied: the client sees the fault, the store keeps the change (a
    /// response lost after commit).
    AfterCommit,
}

#[derive(Debug)]
struct Rule {
    method: Option<Method>,
    path_contains: String,
    code: u16,
    stage: Stage,
    /// Inject on the `every`-th matching request (1 = each one).
    every: u32,
    seen: u32,
    remaining: u32,
}

/// Requests answered late: (method or any, path fragment, delay).
type SlowRule = (Option<Method>, String, std::time::Duration);

/// Requests being held by a slow-down now, and the most held at once.
#[derive(Debug, Default)]
struct Held {
    now: AtomicU64,
    peak: AtomicU64,
}

/// Shared fault switches of one server.
#[derive(Clone, Debug)]
pub struct Faults {
    rules: Arc<Mutex<Vec<Rule>>>,
    injected: Arc<AtomicU64>,
    drops: Arc<tokio::sync::watch::Sender<u64>>,
    slow: Arc<Mutex<Vec<SlowRule>>>,
    held: Arc<Held>,
}

impl Default for Faults {
    fn default() -> Self {
        let (tx, _) = tokio::sync::watch::channel(0);
        Faults {
            rules: Arc::default(),
            injected: Arc::default(),
            drops: Arc::new(tx),
            slow: Arc::default(),
            held: Arc::default(),
        }
    }
}

/// Counts a request as held while it lives.
pub(crate) struct HeldGuard(Arc<Held>);

impl Drop for HeldGuard {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Faults {
    /// Answers the next `times` requests whose method is `method` (any method when empty) and whose
    /// path contains `path_contains` with HTTP `code` and a Kubernetes `Status` body.
    pub fn fail_next(&self, method: &str, path_contains: &str, code: u16, times: u32) {
        self.push(method, path_contains, code, Stage::Before, 1, times);
    }

    /// Like [`Faults::fail_next`], but the request is applied first: the change is committed and
    /// the client still sees `code`, as when a response is lost after the server committed.
    /// Only every `every`-th matching request is hit (1 = each), up to `times` of them.
    pub fn fail_after_commit(&self, method: &str, path_contains: &str, code: u16, every: u32, times: u32) {
        self.push(method, path_contains, code, Stage::AfterCommit, every, times);
    }

    fn push(&self, method: &str, path_contains: &str, code: u16, stage: Stage, every: u32, times: u32) {
        let method = if method.is_empty() {
            None
        } else {
            Method::from_bytes(method.as_bytes()).ok()
        };
        self.rules.lock().push(Rule {
            method,
            path_contains: path_contains.to_string(),
            code,
            stage,
            every: every.max(1),
            seen: 0,
            remaining: times,
        });
    }

    /// Holds every request whose method is `method` (any when empty) and whose path contains
    /// `path_contains` for `delay` before handling it, as a busy API server answers late, until
    /// [`Faults::clear`]. [`Faults::peak_held`] tells how many such requests were held at once.
    pub fn slow_down(&self, method: &str, path_contains: &str, delay: std::time::Duration) {
        let method = if method.is_empty() {
            None
        } else {
            Method::from_bytes(method.as_bytes()).ok()
        };
        self.slow.lock().push((method, path_contains.to_string(), delay));
    }

    /// The most requests a slow-down held at the same time.
    pub fn peak_held(&self) -> u64 {
        self.held.peak.load(Ordering::SeqCst)
    }

    /// How long to hold this request, with a guard counting it as held; `None` when no slow-down
    /// matches.
    pub(crate) fn hold(&self, method: &Method, path: &str) -> Option<(std::time::Duration, HeldGuard)> {
        let delay = self
            .slow
            .lock()
            .iter()
            .find(|(m, fragment, _)| {
                m.as_ref().is_none_or(|m| m == method) && path.contains(fragment.as_str())
            })
            .map(|(_, _, d)| *d)?;
        let now = self.held.now.fetch_add(1, Ordering::SeqCst) + 1;
        self.held.peak.fetch_max(now, Ordering::SeqCst);
        Some((delay, HeldGuard(self.held.clone())))
    }

    /// Removes every rule that has not fired yet, and every slow-down.
    pub fn clear(&self) {
        self.rules.lock().clear();
        self.slow.lock().clear();
    }

    /// Ends every watch that is open now (clients see the stream close and must re-watch).
    pub fn drop_watches(&self) {
        self.drops.send_modify(|n| *n += 1);
    }

    /// How many requests were answered with an injected fault.
    pub fn injected(&self) -> u64 {
        self.injected.load(Ordering::SeqCst)
    }

    /// The status code to inject at `stage` for this request, if a rule matches (consumes one use).
    pub(crate) fn take(&self, stage: Stage, method: &Method, path: &str) -> Option<u16> {
        let mut rules = self.rules.lock();
        let rule = rules.iter_mut().find(|r| {
            r.remaining > 0
                && r.stage == stage
                && r.method.as_ref().is_none_or(|m| m == method)
                && path.contains(&r.path_contains)
        })?;
        rule.seen += 1;
        if !rule.seen.is_multiple_of(rule.every) {
            return None;
        }
        rule.remaining -= 1;
        let code = rule.code;
        rules.retain(|r| r.remaining > 0);
        self.injected.fetch_add(1, Ordering::SeqCst);
        Some(code)
    }

    /// A receiver that changes when watches must be dropped.
    pub(crate) fn drop_signal(&self) -> tokio::sync::watch::Receiver<u64> {
        self.drops.subscribe()
    }
}

/// The `reason` kube-apiserver uses for a status code.
pub(crate) fn reason_for(code: u16) -> &'static str {
    match code {
        409 => "Conflict",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
}
