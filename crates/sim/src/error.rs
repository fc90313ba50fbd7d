//! Errors of the store and the API server, and their Kubernetes `Status` form.

use serde_json::{Value, json};

/// One field-level problem of an invalid object (`Status.details.causes[]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// The field path, e.g. `spec.containers[0].name`.
    pub field: String,
    /// What is wrong with it, e.g. `Required value`.
    pub message: String,
}

/// Why a store or API operation failed. Each variant maps to one Kubernetes `Status` reason and HTTP code.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    /// The object does not exist (404, `NotFound`).
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        /// Group of the resource ("" for core).
        group: String,
        /// Plural resource name, e.g. `pods`.
        resource: String,
        /// Object name.
        name: String,
    },
    /// An object of that name already exists (409, `AlreadyExists`).
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        /// Group of the resource.
        group: String,
        /// Plural resource name.
        resource: String,
        /// Object name.
        name: String,
    },
    /// A write lost an optimistic-concurrency race or violated a precondition (409, `Conflict`).
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {message}")]
    Conflict {
        /// Plural resource name (with group suffix for non-core groups).
        resource: String,
        /// Object name.
        name: String,
        /// Why, e.g. `the object has been modified; please apply your changes to the latest version and try again`.
        message: String,
    },
    /// The object failed validation (422, `Invalid`). The message names the offending field.
    #[error("{kind} \"{name}\" is invalid: {}", join_causes(causes))]
    Invalid {
        /// Kind qualified by its group as the API server writes it: `Pod` for the core group,
        /// `Workload.scheduling.k8s.io` otherwise.
        kind: String,
        /// Object name (may be empty).
        name: String,
        /// The field errors.
        causes: Vec<Cause>,
    },
    /// The request itself is malformed (400, `BadRequest`): undecodable JSON, bad selector, bad patch.
    #[error("{0}")]
    BadRequest(String),
    /// The requested resourceVersion or continue token is older than the retained history (410, `Expired`).
    #[error("{0}")]
    Gone(String),
    /// A patch could not be applied, e.g. a failed JSON-patch `test` (422, `Invalid`, without details).
    #[error("{0}")]
    Unprocessable(String),
    /// The request is understood but refused by an admission rule (403, `Forbidden`).
    #[error("{0}")]
    Forbidden(String),
    /// The URL names no resource this server serves (404, `NotFound`, without details).
    #[error("the server could not find the requested resource")]
    UnknownResource(String),
    /// The verb is not supported on this resource (405, `MethodNotAllowed`).
    #[error("{0}")]
    MethodNotAllowed(String),
    /// The request body's content type is not supported (415, `UnsupportedMediaType`).
    #[error("{0}")]
    UnsupportedMediaType(String),
    /// A wait in the in-process API ran out of time (504, `Timeout`).
    #[error("{0}")]
    Timeout(String),
    /// The eviction subresource refuses to disrupt a pod because of its PodDisruptionBudget: 429
    /// `TooManyRequests` when the budget allows no disruption now (or has not been processed since
    /// its last spec change), 403 `Forbidden` when the budget's status cannot be trusted (negative
    /// allowance, too many unconfirmed evictions). Carries one `DisruptionBudget` cause, as upstream.
    #[error("{message}")]
    DisruptionBudget {
        /// 429 or 403.
        code: u16,
        /// The Status message.
        message: String,
        /// The budget's name (in the details of a 403).
        budget: String,
        /// The `DisruptionBudget` cause's message.
        cause: String,
        /// `details.retryAfterSeconds` and the `Retry-After` header (0: none).
        retry_after_seconds: u32,
    },
    /// A pod selected by more than one PodDisruptionBudget cannot be evicted (500, a Status
    /// without reason, as upstream's eviction subresource answers).
    #[error(
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    )]
    MultipleDisruptionBudgets,
    /// The store or server is shutting down or hit an internal invariant (500, `InternalError`).
    #[error("{0}")]
    Internal(String),
}

impl StoreError {
    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            Self::NotFound { .. } | Self::UnknownResource(_) => 404,
            Self::AlreadyExists { .. } | Self::Conflict { .. } => 409,
            Self::Invalid { .. } | Self::Unprocessable(_) => 422,
            Self::BadRequest(_) => 400,
            Self::Gone(_) => 410,
            Self::Forbidden(_) => 403,
            Self::MethodNotAllowed(_) => 405,
            Self::UnsupportedMediaType(_) => 415,
            Self::Timeout(_) => 504,
            Self::DisruptionBudget { code, .. } => *code,
            Self::Internal(_) | Self::MultipleDisruptionBudgets => 500,
        }
    }

    /// The `Status.reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotFound { .. } | Self::UnknownResource(_) => "NotFound",
            Self::AlreadyExists { .. } => "AlreadyExists",
            Self::Conflict { .. } => "Conflict",
            Self::Invalid { .. } | Self::Unprocessable(_) => "Invalid",
            Self::BadRequest(_) => "BadRequest",
            Self::Gone(_) => "Expired",
            Self::Forbidden(_) => "Forbidden",
            Self::MethodNotAllowed(_) => "MethodNotAllowed",
            Self::UnsupportedMediaType(_) => "UnsupportedMediaType",
            Self::Timeout(_) => "Timeout",
            Self::DisruptionBudget { code: 403, .. } => "Forbidden",
            Self::DisruptionBudget { .. } => "TooManyRequests",
            Self::MultipleDisruptionBudgets => "",
            Self::Internal(_) => "InternalError",
        }
    }

    /// Shorthand for an invalid object with one cause.
    pub fn invalid(kind: &str, name: &str, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            kind: kind.to_string(),
            name: name.to_string(),
            causes: vec![Cause {
                field: field.into(),
                message: message.into(),
            }],
        }
    }

    /// The standard optimistic-concurrency conflict.
    pub fn stale(resource: &str, name: &str) -> Self {
        Self::Conflict {
            resource: resource.to_string(),
            name: name.to_string(),
            message:
                "the object has been modified; please apply your changes to the latest version and try again"
                    .into(),
        }
    }

    /// The `Retry-After` a client should wait, if the error names one.
    pub fn retry_after_seconds(&self) -> Option<u32> {
        match self {
            Self::DisruptionBudget {
                retry_after_seconds, ..
            } if *retry_after_seconds > 0 => Some(*retry_after_seconds),
            _ => None,
        }
    }

    /// Whether this is a 404.
    pub fn is_not_found(&self) -> bool {
        self.code() == 404
    }

    /// Whether this is a 409 conflict (not AlreadyExists).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }

    /// The Kubernetes `Status` object for this error.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code(),
        });
        if self.reason().is_empty()
            && let Some(m) = status.as_object_mut()
        {
            m.remove("reason");
        }
        let details = match self {
            Self::NotFound {
                group,
                resource,
                name,
            }
            | Self::AlreadyExists {
                group,
                resource,
                name,
            } => {
                let mut d = json!({ "name": name, "kind": resource });
                if !group.is_empty() {
                    d["group"] = json!(group);
                }
                Some(d)
            }
            Self::Conflict { resource, name, .. } => Some(json!({ "name": name, "kind": resource })),
            Self::Invalid { kind, name, causes } => {
                // The details name the kind and its group apart.
                let (kind, group) = kind.split_once('.').unwrap_or((kind.as_str(), ""));
                let mut d = json!({
                    "name": name,
                    "kind": kind,
                    "causes": causes.iter().map(|c| json!({
                        "reason": cause_reason(&c.message),
                        "message": c.message,
                        "field": c.field,
                    })).collect::<Vec<_>>(),
                });
                if !group.is_empty() {
                    d["group"] = json!(group);
                }
                Some(d)
            }
            Self::DisruptionBudget {
                code,
                budget,
                cause,
                retry_after_seconds,
                ..
            } => {
                let mut d = json!({"causes": [{"reason": "DisruptionBudget", "message": cause}]});
                if *code == 403 {
                    d["name"] = json!(budget);
                    d["group"] = json!("policy");
                    d["kind"] = json!("poddisruptionbudget");
                }
                if *retry_after_seconds > 0 {
                    d["retryAfterSeconds"] = json!(retry_after_seconds);
                }
                Some(d)
            }
            _ => None,
        };
        if let Some(d) = details {
            status["details"] = d;
        }
        status
    }
}

fn join_causes(causes: &[Cause]) -> String {
    let parts: Vec<String> = causes
        .iter()
        .map(|c| {
            if c.field.is_empty() {
                c.message.clone()
            } else {
                format!("{}: {}", c.field, c.message)
            }
        })
        .collect();
    if parts.len() == 1 {
        parts.join("")
    } else {
        format!("[{}]", parts.join(", "))
    }
}

fn cause_reason(message: &str) -> &'static str {
    if message.starts_with("Required value") {
        "FieldValueRequired"
    } else if message.starts_with("Forbidden") {
        "FieldValueForbidden"
    } else if message.starts_with("Unsupported value") {
        "FieldValueNotSupported"
    } else if message.starts_with("Duplicate value") {
        "FieldValueDuplicate"
    } else if message.starts_with("Too many") {
        "FieldValueTooMany"
    } else if message.starts_with("Too long") {
        "FieldValueTooLong"
    } else {
        "FieldValueInvalid"
    }
}

/// A success `Status` (e.g. the answer to a binding).
pub fn success_status(code: u16) -> Value {
    json!({ "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_shapes() {
        let e = StoreError::NotFound {
            group: String::new(),
            resource: "pods".into(),
            name: "x".into(),
        };
        let s = e.to_status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["message"], "pods \"x\" not found");
        let e = StoreError::invalid("Pod", "p", "spec.containers", "Required value");
        let s = e.to_status();
        assert_eq!(s["code"], 422);
        assert_eq!(
            s["message"],
            "Pod \"p\" is invalid: spec.containers: Required value"
        );
        assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueRequired");
        assert!(s["details"].get("group").is_none(), "{s}");
        // A kind of a named group is qualified in the message and split in the details.
        let e = StoreError::invalid("Workload.scheduling.k8s.io", "w", "spec", "Required value");
        let s = e.to_status();
        assert_eq!(
            s["message"],
            "Workload.scheduling.k8s.io \"w\" is invalid: spec: Required value"
        );
        assert_eq!(s["details"]["kind"], "Workload");
        assert_eq!(s["details"]["group"], "scheduling.k8s.io");
        assert_eq!(StoreError::stale("pods", "p").code(), 409);
    }
}
