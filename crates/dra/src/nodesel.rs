//! Matching nodes against `NodeSelector`s, as `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`
//! does for the fields DRA uses (`ResourceSlice.spec.nodeSelector`, `Device.nodeSelector`).
//!
//! Terms are ORed, requirements inside a term are ANDed, and a term without requirements matches
//! nothing. Label requirements support `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt` and `Lt`;
//! field requirements support `metadata.name` with `In` and `NotIn`. Malformed selectors are errors.

use std::num::ParseIntError;

use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement};

/// Why a node selector cannot be evaluated: it is malformed. The messages are the ones the
/// allocator reports for the slice (see `FatalError::NodeSelector`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeSelectorError {
    /// `In` or `NotIn` without values.
    #[error("values must be non-empty for operator {operator} on key {key}")]
    MissingValues {
        /// The operator.
        operator: String,
        /// The label key.
        key: String,
    },
    /// `Exists` or `DoesNotExist` with values.
    #[error("values must be empty for operator {operator} on key {key}")]
    UnexpectedValues {
        /// The operator.
        operator: String,
        /// The label key.
        key: String,
    },
    /// `Gt` or `Lt` without exactly one value.
    #[error("operator {operator} on key {key} needs exactly one value")]
    NotOneValue {
        /// The operator.
        operator: String,
        /// The label key.
        key: String,
    },
    /// The value of `Gt` or `Lt` is not an integer.
    #[error("value {value:?} for operator {operator} is not an integer")]
    NotAnInteger {
        /// The value.
        value: String,
        /// The operator.
        operator: String,
        /// Why it does not parse.
        #[source]
        source: ParseIntError,
    },
    /// An operator label requirements do not have.
    #[error("{operator:?} is not a valid node selector operator")]
    InvalidOperator {
        /// The operator.
        operator: String,
    },
    /// A field other than `metadata.name`.
    #[error("{key:?} is not a supported node field selector key")]
    UnsupportedFieldKey {
        /// The field.
        key: String,
    },
    /// A field requirement without exactly one value.
    #[error("field selector {key} {operator} needs exactly one value")]
    FieldNotOneValue {
        /// The field.
        key: String,
        /// The operator.
        operator: String,
    },
    /// An operator field requirements do not have.
    #[error("{operator:?} is not a valid operator for field selector {key}")]
    InvalidFieldOperator {
        /// The operator.
        operator: String,
        /// The field.
        key: String,
    },
}

/// Whether `node` is selected by the node-selection fields of a slice or device.
/// Exactly one of the fields is expected to be set; with none set the answer is `false`.
pub fn node_matches(
    node: &Node,
    node_name: Option<&str>,
    all_nodes: bool,
    selector: Option<&NodeSelector>,
) -> Result<bool, NodeSelectorError> {
    match (node_name.filter(|n| !n.is_empty()), all_nodes, selector) {
        (Some(name), _, _) => Ok(node.metadata.name.as_deref() == Some(name)),
        (None, true, _) => Ok(true),
        (None, false, Some(sel)) => node_selector_matches(sel, node),
        _ => Ok(false),
    }
}

/// Evaluates a node selector against a node.
pub fn node_selector_matches(selector: &NodeSelector, node: &Node) -> Result<bool, NodeSelectorError> {
    let mut matched = false;
    for term in &selector.node_selector_terms {
        let exprs = term.match_expressions.as_deref().unwrap_or_default();
        let fields = term.match_fields.as_deref().unwrap_or_default();
        if exprs.is_empty() && fields.is_empty() {
            continue;
        }
        // Evaluate every term so malformed selectors are reported even after a match.
        let mut ok = true;
        for req in exprs {
            let label = node
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(&req.key))
                .map(String::as_str);
            ok &= label_requirement_matches(req, label)?;
        }
        for req in fields {
            ok &= field_requirement_matches(req, node)?;
        }
        matched |= ok;
    }
    Ok(matched)
}

fn values(req: &NodeSelectorRequirement) -> &[String] {
    req.values.as_deref().unwrap_or_default()
}

fn label_requirement_matches(
    req: &NodeSelectorRequirement,
    label: Option<&str>,
) -> Result<bool, NodeSelectorError> {
    let vals = values(req);
    match req.operator.as_str() {
        "In" | "NotIn" => {
            if vals.is_empty() {
                return Err(NodeSelectorError::MissingValues {
                    operator: req.operator.clone(),
                    key: req.key.clone(),
                });
            }
            let contained = label.is_some_and(|l| vals.iter().any(|v| v == l));
            Ok(if req.operator == "In" {
                contained
            } else {
                !contained
            })
        }
        "Exists" | "DoesNotExist" => {
            if !vals.is_empty() {
                return Err(NodeSelectorError::UnexpectedValues {
                    operator: req.operator.clone(),
                    key: req.key.clone(),
                });
            }
            Ok((req.operator == "Exists") == label.is_some())
        }
        "Gt" | "Lt" => {
            let [v] = vals else {
                return Err(NodeSelectorError::NotOneValue {
                    operator: req.operator.clone(),
                    key: req.key.clone(),
                });
            };
            let bound: i64 = v.parse().map_err(|source| NodeSelectorError::NotAnInteger {
                value: v.clone(),
                operator: req.operator.clone(),
                source,
            })?;
            let Some(actual) = label.and_then(|l| l.parse::<i64>().ok()) else {
                return Ok(false);
            };
            Ok(if req.operator == "Gt" {
                actual > bound
            } else {
                actual < bound
            })
        }
        other => Err(NodeSelectorError::InvalidOperator {
            operator: other.to_string(),
        }),
    }
}

fn field_requirement_matches(req: &NodeSelectorRequirement, node: &Node) -> Result<bool, NodeSelectorError> {
    if req.key != "metadata.name" {
        return Err(NodeSelectorError::UnsupportedFieldKey { key: req.key.clone() });
    }
    let vals = values(req);
    if vals.len() != 1 {
        return Err(NodeSelectorError::FieldNotOneValue {
            key: req.key.clone(),
            operator: req.operator.clone(),
        });
    }
    let name = node.metadata.name.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => Ok(vals[0] == name),
        "NotIn" => Ok(vals[0] != name),
        other => Err(NodeSelectorError::InvalidFieldOperator {
            operator: other.to_string(),
            key: req.key.clone(),
        }),
    }
}
