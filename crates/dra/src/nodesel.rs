//! Matching nodes against `NodeSelector`s, as `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`
//! does for the fields DRA uses (`ResourceSlice.spec.nodeSelector`, `Device.nodeSelector`).
//!
//! Terms are ORed, requirements inside a term are ANDed, and a term without requirements matches
//! nothing. Label requirements support `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt` and `Lt`;
//! field requirements support `metadata.name` with `In` and `NotIn`. Malformed selectors are errors.

use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement};

/// Whether `node` is selected by the node-selection fields of a slice or device.
/// Exactly one of the fields is expected to be set; with none set the answer is `false`.
pub fn node_matches(
    node: &Node,
    node_name: Option<&str>,
    all_nodes: bool,
    selector: Option<&NodeSelector>,
) -> Result<bool, String> {
    match (node_name.filter(|n| !n.is_empty()), all_nodes, selector) {
        (Some(name), _, _) => Ok(node.metadata.name.as_deref() == Some(name)),
        (None, true, _) => Ok(true),
        (None, false, Some(sel)) => node_selector_matches(sel, node),
        _ => Ok(false),
    }
}

/// Evaluates a node selector against a node.
pub fn node_selector_matches(selector: &NodeSelector, node: &Node) -> Result<bool, String> {
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

fn label_requirement_matches(req: &NodeSelectorRequirement, label: Option<&str>) -> Result<bool, String> {
    let vals = values(req);
    match req.operator.as_str() {
        "In" | "NotIn" => {
            if vals.is_empty() {
                return Err(format!(
                    "values must be non-empty for operator {} on key {}",
                    req.operator, req.key
                ));
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
                return Err(format!(
                    "values must be empty for operator {} on key {}",
                    req.operator, req.key
                ));
            }
            Ok((req.operator == "Exists") == label.is_some())
        }
        "Gt" | "Lt" => {
            let [v] = vals else {
                return Err(format!(
                    "operator {} on key {} needs exactly one value",
                    req.operator, req.key
                ));
            };
            let bound: i64 = v
                .parse()
                .map_err(|_| format!("value {v:?} for operator {} is not an integer", req.operator))?;
            let Some(actual) = label.and_then(|l| l.parse::<i64>().ok()) else {
                return Ok(false);
            };
            Ok(if req.operator == "Gt" {
                actual > bound
            } else {
                actual < bound
            })
        }
        other => Err(format!("{other:?} is not a valid node selector operator")),
    }
}

fn field_requirement_matches(req: &NodeSelectorRequirement, node: &Node) -> Result<bool, String> {
    if req.key != "metadata.name" {
        return Err(format!(
            "{:?} is not a supported node field selector key",
            req.key
        ));
    }
    let vals = values(req);
    if vals.len() != 1 {
        return Err(format!(
            "field selector {} {} needs exactly one value",
            req.key, req.operator
        ));
    }
    let name = node.metadata.name.as_deref().unwrap_or_default();
    match req.operator.as_str() {
        "In" => Ok(vals[0] == name),
        "NotIn" => Ok(vals[0] != name),
        other => Err(format!(
            "{other:?} is not a valid operator for field selector {}",
            req.key
        )),
    }
}
