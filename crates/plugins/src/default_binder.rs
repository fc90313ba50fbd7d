//! `DefaultBinder`: binds the pod to the chosen node through a [`Binder`], which the runtime
//! implements by POSTing `pods/binding` (upstream `defaultbinder`). Keeping the API call behind a
//! trait keeps this crate free of HTTP and lets tests record bindings.
//!
//! A binder that can also hand the write over as a future ([`Binder::bind_later`]) lets a binding
//! cycle with nothing else to wait for run on the runtime's I/O threads instead of holding a
//! thread of its own for the length of one API round trip.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use unisched_framework::{BindPlugin, CycleState, Plugin, PodInfo, Status, StatusFuture};

use crate::names::DEFAULT_BINDER;

/// Why a binding failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// The pod is already bound, or changed meanwhile (HTTP 409).
    #[error("conflict: {0}")]
    Conflict(String),
    /// The pod (or node) no longer exists (HTTP 404).
    #[error("not found: {0}")]
    NotFound(String),
    /// Any other API failure.
    #[error("{0}")]
    Api(String),
}

/// The binding write as a future (see [`Binder::bind_later`]).
pub type BindFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), BindError>> + Send + 'static>>;

/// Writes a binding of `pod` to `node`.
pub trait Binder: Send + Sync {
    /// Binds the pod; must not be retried by the caller on `Conflict`.
    fn bind(&self, pod: &Pod, node: &str) -> Result<(), BindError>;

    /// The same write as a future that needs no thread of its own while it waits, or `None` (the
    /// default) when this binder only binds synchronously.
    fn bind_later(&self, _pod: &Pod, _node: &str) -> Option<BindFuture> {
        None
    }
}

/// What a binding's outcome means for the cycle (the same for both ways of binding).
fn bind_status(pod: &str, node: &str, result: Result<(), BindError>) -> Status {
    match result {
        Ok(()) => Status::success(),
        Err(e) => {
            tracing::debug!(pod, node, error = %e, "binding failed");
            Status::error(e)
        }
    }
}

/// Binds every pod through the configured [`Binder`].
#[derive(Clone)]
pub struct DefaultBinder {
    binder: Arc<dyn Binder>,
}

impl std::fmt::Debug for DefaultBinder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DefaultBinder").finish_non_exhaustive()
    }
}

impl DefaultBinder {
    /// A binder plugin over `binder`.
    pub fn new(binder: Arc<dyn Binder>) -> Self {
        DefaultBinder { binder }
    }
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &str {
        DEFAULT_BINDER
    }
    unisched_framework::serves!(as_bind);
}

impl BindPlugin for DefaultBinder {
    fn bind(&self, _state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        bind_status(&pod.key(), node, self.binder.bind(&pod.pod, node))
    }

    fn bind_async(&self, _state: &CycleState, pod: &PodInfo, node: &str) -> Option<StatusFuture> {
        let write = self.binder.bind_later(&pod.pod, node)?;
        let (key, node) = (pod.key(), node.to_string());
        Some(Box::pin(async move { bind_status(&key, &node, write.await) }))
    }
}

#[cfg(test)]
mod tests {
    use unisched_framework::Code;

    use super::*;
    use crate::testing::{PodBuilder, RecordingBinder, poll_to_end};

    /// Offers every binding as a future that writes when first polled.
    struct Later(Arc<RecordingBinder>);
    impl Binder for Later {
        fn bind(&self, pod: &Pod, node: &str) -> Result<(), BindError> {
            self.0.bind(pod, node)
        }
        fn bind_later(&self, pod: &Pod, node: &str) -> Option<BindFuture> {
            let (inner, pod, node) = (Arc::clone(&self.0), pod.clone(), node.to_string());
            Some(Box::pin(async move { inner.bind(&pod, &node) }))
        }
    }

    #[test]
    fn bind_table() {
        struct Case {
            name: &'static str,
            fail: Option<BindError>,
            code: Code,
            message: &'static str,
            recorded: usize,
        }
        let cases = [
            Case {
                name: "success",
                fail: None,
                code: Code::Success,
                message: "",
                recorded: 1,
            },
            Case {
                name: "conflict",
                fail: Some(BindError::Conflict(
                    "pod p is already assigned to node \"m\"".into(),
                )),
                code: Code::Error,
                message: "conflict: pod p is already assigned to node \"m\"",
                recorded: 0,
            },
            Case {
                name: "not found",
                fail: Some(BindError::NotFound("pods \"p\"".into())),
                code: Code::Error,
                message: "not found: pods \"p\"",
                recorded: 0,
            },
            Case {
                name: "api",
                fail: Some(BindError::Api("timeout".into())),
                code: Code::Error,
                message: "timeout",
                recorded: 0,
            },
        ];
        for c in cases {
            let rec = RecordingBinder::new();
            rec.fail_with(c.fail.clone());
            let pl = DefaultBinder::new(rec.clone());
            let s = pl.bind(&CycleState::new(), &PodBuilder::new("p").info(), "n1");
            assert_eq!(s.code(), c.code, "{}", c.name);
            assert_eq!(s.message(), c.message, "{}", c.name);
            assert_eq!(rec.bindings().len(), c.recorded, "{}", c.name);
            // A binder without futures: Bind runs only synchronously.
            assert!(
                pl.bind_async(&CycleState::new(), &PodBuilder::new("p").info(), "n1")
                    .is_none(),
                "{}",
                c.name
            );
            // Through a binder's future, the same write and the same status.
            let rec = RecordingBinder::new();
            rec.fail_with(c.fail);
            let pl = DefaultBinder::new(Arc::new(Later(rec.clone())));
            let Some(future) = pl.bind_async(&CycleState::new(), &PodBuilder::new("p").info(), "n1") else {
                panic!("{}: a binder with futures binds asynchronously", c.name);
            };
            assert!(
                rec.bindings().is_empty(),
                "{}: nothing runs before it is awaited",
                c.name
            );
            let s = poll_to_end(future);
            assert_eq!(s.code(), c.code, "{}", c.name);
            assert_eq!(s.message(), c.message, "{}", c.name);
            assert_eq!(rec.bindings().len(), c.recorded, "{}", c.name);
        }
        let rec = RecordingBinder::new();
        DefaultBinder::new(rec.clone()).bind(
            &CycleState::new(),
            &PodBuilder::new("p").namespace("ns").info(),
            "n1",
        );
        assert_eq!(rec.bindings(), vec![("ns/p".to_string(), "n1".to_string())]);
    }
}
