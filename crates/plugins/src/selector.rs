//! Node selectors compiled once per pod (upstream `component-helpers/scheduling/corev1/nodeaffinity`).
//!
//! Semantics that matter and are easy to get wrong:
//! - terms are ORed; the requirements inside a term are ANDed;
//! - a term with neither `matchExpressions` nor `matchFields` matches nothing (and is dropped);
//! - a term whose requirements do not parse matches nothing; for pods this is silent (the API server
//!   validates pods, so this is backwards compatibility only), for scheduler args it is an error;
//! - `matchFields` knows one field, `metadata.name`; a node without a name ignores field terms;
//! - `Gt`/`Lt` compare the label value as an integer and fail when the label is absent or not one.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod, PreferredSchedulingTerm,
};

use crate::helper::{go_string_slice, invalid, label_value_errors, qualified_name_errors, quote};

/// The field selector key for a node's name.
pub(crate) const OBJECT_NAME_FIELD: &str = "metadata.name";

#[derive(Clone, Debug, PartialEq, Eq)]
enum LabelOp {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

#[derive(Clone, Debug)]
struct LabelRequirement {
    key: String,
    op: LabelOp,
    values: Vec<String>,
}

impl LabelRequirement {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match &self.op {
            LabelOp::In => value.is_some_and(|v| self.values.contains(v)),
            LabelOp::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            LabelOp::Exists => value.is_some(),
            LabelOp::DoesNotExist => value.is_none(),
            LabelOp::Gt(bound) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *bound),
            LabelOp::Lt(bound) => value
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *bound),
        }
    }
}

#[derive(Clone, Debug)]
struct FieldRequirement {
    key: String,
    value: String,
    equal: bool,
}

impl FieldRequirement {
    fn matches(&self, node_name: &str) -> bool {
        let actual = if self.key == OBJECT_NAME_FIELD {
            node_name
        } else {
            ""
        };
        (actual == self.value) == self.equal
    }
}

/// One parsed `NodeSelectorTerm`.
#[derive(Clone, Debug, Default)]
struct Term {
    labels: Option<Vec<LabelRequirement>>,
    fields: Option<Vec<FieldRequirement>>,
    errors: Vec<String>,
}

const LABEL_OPERATORS: &str = "\"In\", \"NotIn\", \"Exists\", \"DoesNotExist\", \"Gt\", \"Lt\"";

fn parse_label_requirement(
    r: &NodeSelectorRequirement,
    path: &str,
    errors: &mut Vec<String>,
) -> Option<LabelRequirement> {
    let values = r.values.clone().unwrap_or_default();
    let values_path = format!("{path}.values");
    let before = errors.len();
    for e in qualified_name_errors(&r.key) {
        errors.push(invalid(&format!("{path}.key"), quote(&r.key), e));
    }
    let op = match r.operator.as_str() {
        "In" | "NotIn" => {
            if values.is_empty() {
                errors.push(invalid(
                    &values_path,
                    go_string_slice(&values),
                    "for 'in', 'notin' operators, values set can't be empty",
                ));
            }
            if r.operator == "In" {
                LabelOp::In
            } else {
                LabelOp::NotIn
            }
        }
        "Exists" | "DoesNotExist" => {
            if !values.is_empty() {
                errors.push(invalid(
                    &values_path,
                    go_string_slice(&values),
                    "values set must be empty for exists and does not exist",
                ));
            }
            if r.operator == "Exists" {
                LabelOp::Exists
            } else {
                LabelOp::DoesNotExist
            }
        }
        "Gt" | "Lt" => {
            if values.len() != 1 {
                errors.push(invalid(
                    &values_path,
                    go_string_slice(&values),
                    "for 'Gt', 'Lt' operators, exactly one value is required",
                ));
            }
            let mut bound = 0;
            for (i, v) in values.iter().enumerate() {
                match v.parse::<i64>() {
                    Ok(n) => bound = n,
                    Err(_) => errors.push(invalid(
                        &format!("{values_path}[{i}]"),
                        quote(v),
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    )),
                }
            }
            if r.operator == "Gt" {
                LabelOp::Gt(bound)
            } else {
                LabelOp::Lt(bound)
            }
        }
        other => {
            errors.push(format!(
                "{path}.operator: Unsupported value: {}: supported values: {LABEL_OPERATORS}",
                quote(other)
            ));
            return None;
        }
    };
    for (i, v) in values.iter().enumerate() {
        for e in label_value_errors(v) {
            errors.push(invalid(&format!("{values_path}[{i}]"), quote(v), e));
        }
    }
    (errors.len() == before).then(|| LabelRequirement {
        key: r.key.clone(),
        op,
        values,
    })
}

fn parse_field_requirement(
    r: &NodeSelectorRequirement,
    path: &str,
    errors: &mut Vec<String>,
) -> Option<FieldRequirement> {
    let values = r.values.clone().unwrap_or_default();
    let equal = match r.operator.as_str() {
        "In" => true,
        "NotIn" => false,
        other => {
            errors.push(format!(
                "{path}.operator: Unsupported value: {}: supported values: \"In\", \"NotIn\"",
                quote(other)
            ));
            return None;
        }
    };
    if values.len() != 1 {
        errors.push(invalid(
            &format!("{path}.values"),
            go_string_slice(&values),
            "must have one element",
        ));
        return None;
    }
    Some(FieldRequirement {
        key: r.key.clone(),
        value: values[0].clone(),
        equal,
    })
}

fn is_empty_term(t: &NodeSelectorTerm) -> bool {
    t.match_expressions.as_ref().is_none_or(Vec::is_empty)
        && t.match_fields.as_ref().is_none_or(Vec::is_empty)
}

impl Term {
    fn parse(t: &NodeSelectorTerm, path: &str) -> Term {
        let mut term = Term::default();
        if let Some(exprs) = t.match_expressions.as_ref().filter(|e| !e.is_empty()) {
            let reqs: Vec<LabelRequirement> = exprs
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    parse_label_requirement(r, &format!("{path}.matchExpressions[{i}]"), &mut term.errors)
                })
                .collect();
            term.labels = Some(reqs);
        }
        if let Some(fields) = t.match_fields.as_ref().filter(|f| !f.is_empty()) {
            let reqs: Vec<FieldRequirement> = fields
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    parse_field_requirement(r, &format!("{path}.matchFields[{i}]"), &mut term.errors)
                })
                .collect();
            term.fields = Some(reqs);
        }
        term
    }

    fn matches(&self, node: &Node) -> bool {
        if !self.errors.is_empty() {
            return false;
        }
        if let Some(labels) = &self.labels {
            let empty = BTreeMap::new();
            let node_labels = node.metadata.labels.as_ref().unwrap_or(&empty);
            if !labels.iter().all(|r| r.matches(node_labels)) {
                return false;
            }
        }
        if let Some(fields) = &self.fields {
            let name = node.metadata.name.as_deref().unwrap_or("");
            if !name.is_empty() && !fields.iter().all(|r| r.matches(name)) {
                return false;
            }
        }
        true
    }
}

fn join_path(prefix: &str, child: &str) -> String {
    if prefix.is_empty() {
        child.to_string()
    } else {
        format!("{prefix}.{child}")
    }
}

/// A parsed `NodeSelector`: terms ORed; terms that failed to parse match nothing.
#[derive(Clone, Debug, Default)]
pub struct NodeSelectorMatcher {
    terms: Vec<Term>,
}

impl NodeSelectorMatcher {
    /// Parses `selector`, keeping parse errors inside the terms (a broken term matches nothing).
    /// `path` prefixes error messages (`addedAffinity.requiredDuringSchedulingIgnoredDuringExecution`).
    pub fn lenient(selector: &NodeSelector, path: &str) -> Self {
        let terms_path = join_path(path, "nodeSelectorTerms");
        let terms = selector
            .node_selector_terms
            .iter()
            .enumerate()
            .filter(|(_, t)| !is_empty_term(t))
            .map(|(i, t)| Term::parse(t, &format!("{terms_path}[{i}]")))
            .collect();
        NodeSelectorMatcher { terms }
    }

    /// Parses `selector`, failing with every parse error (for scheduler args).
    pub fn strict(selector: &NodeSelector, path: &str) -> Result<Self, Vec<String>> {
        let m = Self::lenient(selector, path);
        let errors = m.errors();
        if errors.is_empty() { Ok(m) } else { Err(errors) }
    }

    /// All parse errors.
    pub fn errors(&self) -> Vec<String> {
        self.terms.iter().flat_map(|t| t.errors.iter().cloned()).collect()
    }

    /// True when some term matches the node.
    pub fn matches(&self, node: &Node) -> bool {
        self.terms.iter().any(|t| t.matches(node))
    }
}

/// A pod's `spec.nodeSelector` and required node affinity, parsed once (upstream
/// `RequiredNodeAffinity`). Both must match.
#[derive(Clone, Debug, Default)]
pub struct RequiredNodeAffinity {
    node_selector: Option<Vec<(String, String)>>,
    affinity: Option<NodeSelectorMatcher>,
}

impl RequiredNodeAffinity {
    /// Parses the pod's `spec.nodeSelector` and
    /// `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub fn of(pod: &Pod) -> Self {
        let spec = pod.spec.as_ref();
        let node_selector = spec
            .and_then(|s| s.node_selector.as_ref())
            .filter(|m| !m.is_empty())
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
        let affinity = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| na.required_during_scheduling_ignored_during_execution.as_ref())
            .map(|ns| NodeSelectorMatcher::lenient(ns, ""));
        RequiredNodeAffinity {
            node_selector,
            affinity,
        }
    }

    /// True when the node satisfies both the node selector and the required affinity.
    pub fn matches(&self, node: &Node) -> bool {
        if let Some(sel) = &self.node_selector {
            let labels = node.metadata.labels.as_ref();
            if !sel.iter().all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v)) {
                return false;
            }
        }
        self.affinity.as_ref().is_none_or(|a| a.matches(node))
    }
}

/// Parsed preferred scheduling terms: a node's score is the sum of the weights of the terms it
/// matches. Terms with weight 0 or without requirements are dropped.
#[derive(Clone, Debug, Default)]
pub(crate) struct PreferredTerms {
    terms: Vec<(Term, i64)>,
}

impl PreferredTerms {
    /// Parses the terms; any parse error fails (upstream `NewPreferredSchedulingTerms`).
    pub(crate) fn parse(terms: &[PreferredSchedulingTerm], path: &str) -> Result<Self, Vec<String>> {
        let mut errors = Vec::new();
        let mut parsed = Vec::new();
        for (i, t) in terms.iter().enumerate() {
            if t.weight == 0 || is_empty_term(&t.preference) {
                continue;
            }
            let p = if path.is_empty() {
                format!("[{i}]")
            } else {
                format!("{path}[{i}]")
            };
            let term = Term::parse(&t.preference, &p);
            if term.errors.is_empty() {
                parsed.push((term, i64::from(t.weight)));
            } else {
                errors.extend(term.errors);
            }
        }
        if errors.is_empty() {
            Ok(PreferredTerms { terms: parsed })
        } else {
            Err(errors)
        }
    }

    /// Sum of the weights of the matching terms.
    pub(crate) fn score(&self, node: &Node) -> i64 {
        self.terms
            .iter()
            .filter(|(t, _)| t.matches(node))
            .map(|(_, w)| *w)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str, labels: &[(&str, &str)]) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            ..Node::default()
        }
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect())
                .filter(|v: &Vec<String>| !v.is_empty()),
        }
    }

    fn term(exprs: Vec<NodeSelectorRequirement>, fields: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(exprs).filter(|e| !e.is_empty()),
            match_fields: Some(fields).filter(|f| !f.is_empty()),
        }
    }

    #[test]
    fn selector_table() {
        struct Case {
            name: &'static str,
            terms: Vec<NodeSelectorTerm>,
            node: Node,
            want: bool,
        }
        let n = || node("n1", &[("zone", "a"), ("gen", "5"), ("ssd", "")]);
        let cases = [
            Case {
                name: "In match",
                terms: vec![term(vec![req("zone", "In", &["a", "b"])], vec![])],
                node: n(),
                want: true,
            },
            Case {
                name: "In no match",
                terms: vec![term(vec![req("zone", "In", &["b"])], vec![])],
                node: n(),
                want: false,
            },
            Case {
                name: "In missing label",
                terms: vec![term(vec![req("rack", "In", &["1"])], vec![])],
                node: n(),
                want: false,
            },
            Case {
                name: "NotIn missing label matches",
                terms: vec![term(vec![req("rack", "NotIn", &["1"])], vec![])],
                node: n(),
                want: true,
            },
            Case {
                name: "NotIn value present",
                terms: vec![term(vec![req("zone", "NotIn", &["a"])], vec![])],
                node: n(),
                want: false,
            },
            Case {
                name: "Exists",
                terms: vec![term(vec![req("ssd", "Exists", &[])], vec![])],
                node: n(),
                want: true,
            },
            Case {
                name: "DoesNotExist",
                terms: vec![term(vec![req("ssd", "DoesNotExist", &[])], vec![])],
                node: n(),
                want: false,
            },
            Case {
                name: "Gt",
                terms: vec![term(vec![req("gen", "Gt", &["4"])], vec![])],
                node: n(),
                want: true,
            },
            Case {
                name: "Gt equal fails",
                terms: vec![term(vec![req("gen", "Gt", &["5"])], vec![])],
                node: n(),
                want: false,
            },
            Case {
                name: "Lt",
                terms: vec![term(vec![req("gen", "Lt", &["6"])], vec![])],
                node: n(),
                want: true,
            },
            Case {
                name: "Gt non-integer label",
                terms: vec![term(vec![req("zone", "Gt", &["1"])], vec![])],
                node: n(),
                want: false,
            },
            Case {
                name: "Gt invalid value never matches",
                terms: vec![term(vec![req("gen", "Gt", &["x"])], vec![])],
                node: n(),
                want: false,
            },
            Case {
                name: "AND inside a term",
                terms: vec![term(
                    vec![req("zone", "In", &["a"]), req("gen", "Lt", &["5"])],
                    vec![],
                )],
                node: n(),
                want: false,
            },
            Case {
                name: "OR across terms",
                terms: vec![
                    term(vec![req("zone", "In", &["z"])], vec![]),
                    term(vec![req("gen", "In", &["5"])], vec![]),
                ],
                node: n(),
                want: true,
            },
            Case {
                name: "broken term skipped, other matches",
                terms: vec![
                    term(vec![req("zone", "Bogus", &["a"])], vec![]),
                    term(vec![req("zone", "In", &["a"])], vec![]),
                ],
                node: n(),
                want: true,
            },
            Case {
                name: "empty term matches nothing",
                terms: vec![term(vec![], vec![])],
                node: n(),
                want: false,
            },
            Case {
                name: "no terms matches nothing",
                terms: vec![],
                node: n(),
                want: false,
            },
            Case {
                name: "matchFields name In",
                terms: vec![term(vec![], vec![req("metadata.name", "In", &["n1"])])],
                node: n(),
                want: true,
            },
            Case {
                name: "matchFields name NotIn",
                terms: vec![term(vec![], vec![req("metadata.name", "NotIn", &["n1"])])],
                node: n(),
                want: false,
            },
            Case {
                name: "matchFields with two values is invalid",
                terms: vec![term(vec![], vec![req("metadata.name", "In", &["n1", "n2"])])],
                node: n(),
                want: false,
            },
            Case {
                name: "matchFields unknown field compares empty",
                terms: vec![term(vec![], vec![req("spec.foo", "In", &["x"])])],
                node: n(),
                want: false,
            },
            Case {
                name: "fields and labels ANDed",
                terms: vec![term(
                    vec![req("zone", "In", &["a"])],
                    vec![req("metadata.name", "In", &["n2"])],
                )],
                node: n(),
                want: false,
            },
            Case {
                name: "fields ignored for unnamed node",
                terms: vec![term(vec![], vec![req("metadata.name", "In", &["n2"])])],
                node: node("", &[]),
                want: true,
            },
        ];
        for c in cases {
            let m = NodeSelectorMatcher::lenient(
                &NodeSelector {
                    node_selector_terms: c.terms,
                },
                "",
            );
            assert_eq!(m.matches(&c.node), c.want, "{}", c.name);
        }
    }

    #[test]
    fn strict_errors_name_the_field() {
        struct Case {
            name: &'static str,
            req: NodeSelectorRequirement,
            fields: bool,
            want: &'static str,
        }
        let cases = [
            Case {
                name: "bad operator",
                req: req("zone", "Like", &["a"]),
                fields: false,
                want: "p.nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: \"Like\": supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\", \"Gt\", \"Lt\"",
            },
            Case {
                name: "In without values",
                req: req("zone", "In", &[]),
                fields: false,
                want: "p.nodeSelectorTerms[0].matchExpressions[0].values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty",
            },
            Case {
                name: "Exists with values",
                req: req("zone", "Exists", &["a"]),
                fields: false,
                want: "values set must be empty for exists and does not exist",
            },
            Case {
                name: "Gt not integer",
                req: req("gen", "Gt", &["x"]),
                fields: false,
                want: "p.nodeSelectorTerms[0].matchExpressions[0].values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer",
            },
            Case {
                name: "bad key",
                req: req("-zone", "Exists", &[]),
                fields: false,
                want: "p.nodeSelectorTerms[0].matchExpressions[0].key: Invalid value: \"-zone\": name part must consist",
            },
            Case {
                name: "field operator",
                req: req("metadata.name", "Exists", &[]),
                fields: true,
                want: "p.nodeSelectorTerms[0].matchFields[0].operator: Unsupported value: \"Exists\": supported values: \"In\", \"NotIn\"",
            },
            Case {
                name: "field values",
                req: req("metadata.name", "In", &["a", "b"]),
                fields: true,
                want: "p.nodeSelectorTerms[0].matchFields[0].values: Invalid value: []string{\"a\", \"b\"}: must have one element",
            },
        ];
        for c in cases {
            let t = if c.fields {
                term(vec![], vec![c.req])
            } else {
                term(vec![c.req], vec![])
            };
            let errs = NodeSelectorMatcher::strict(
                &NodeSelector {
                    node_selector_terms: vec![t],
                },
                "p",
            )
            .unwrap_err();
            assert!(errs.iter().any(|e| e.contains(c.want)), "{}: {errs:?}", c.name);
        }
    }

    #[test]
    fn preferred_terms_score() {
        let terms = vec![
            PreferredSchedulingTerm {
                weight: 5,
                preference: term(vec![req("zone", "In", &["a"])], vec![]),
            },
            PreferredSchedulingTerm {
                weight: 3,
                preference: term(vec![req("gen", "Exists", &[])], vec![]),
            },
            PreferredSchedulingTerm {
                weight: 0,
                preference: term(vec![req("zone", "In", &["a"])], vec![]),
            },
            PreferredSchedulingTerm {
                weight: 7,
                preference: term(vec![], vec![]),
            },
        ];
        let p = PreferredTerms::parse(&terms, "").unwrap();
        assert_eq!(p.score(&node("n", &[("zone", "a"), ("gen", "1")])), 8);
        assert_eq!(p.score(&node("n", &[("zone", "b")])), 0);
        let bad = vec![PreferredSchedulingTerm {
            weight: 1,
            preference: term(vec![req("k", "Nope", &[])], vec![]),
        }];
        assert!(PreferredTerms::parse(&bad, "x").is_err());
    }

    #[test]
    fn required_affinity_combines_selector_and_terms() {
        use k8s_openapi::api::core::v1::{Affinity, NodeAffinity as ApiNodeAffinity, PodSpec};
        let pod = Pod {
            spec: Some(PodSpec {
                node_selector: Some([("zone".to_string(), "a".to_string())].into_iter().collect()),
                affinity: Some(Affinity {
                    node_affinity: Some(ApiNodeAffinity {
                        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                            node_selector_terms: vec![term(vec![req("gen", "Gt", &["3"])], vec![])],
                        }),
                        ..ApiNodeAffinity::default()
                    }),
                    ..Affinity::default()
                }),
                ..PodSpec::default()
            }),
            ..Pod::default()
        };
        let r = RequiredNodeAffinity::of(&pod);
        assert!(r.matches(&node("n", &[("zone", "a"), ("gen", "5")])));
        assert!(
            !r.matches(&node("n", &[("zone", "b"), ("gen", "5")])),
            "selector mismatch"
        );
        assert!(
            !r.matches(&node("n", &[("zone", "a"), ("gen", "2")])),
            "affinity mismatch"
        );
        assert!(
            RequiredNodeAffinity::of(&Pod::default()).matches(&node("n", &[])),
            "nothing required"
        );
    }
}
