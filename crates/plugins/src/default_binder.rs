//! `DefaultBinder`: binds the pod to the chosen node through a [`Binder`], which the runtime
//! implements by POSTing `pods/binding` (upstream `defaultbinder`). Keeping the API call behind a
//! trait keeps this crate free of HTTP and lets tests record bindings.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use unisched_framework::{BindPlugin, CycleState, Plugin, PodInfo, Status};

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

/// Writes a binding of `pod` to `node`.
pub trait Binder: Send + Sync {
    /// Binds the pod; must not be retried by the caller on `Conflict`.
    fn bind(&self, pod: &Pod, node: &str) -> Result<(), BindError>;
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
        match self.binder.bind(&pod.pod, node) {
            Ok(()) => Status::success(),
            Err(e) => {
                tracing::debug!(pod = %pod.key(), node, error = %e, "binding failed");
                Status::error(e)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use unisched_framework::Code;

    use super::*;
    use crate::testing::{PodBuilder, RecordingBinder};

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
            rec.fail_with(c.fail);
            let pl = DefaultBinder::new(rec.clone());
            let s = pl.bind(&CycleState::new(), &PodBuilder::new("p").info(), "n1");
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
