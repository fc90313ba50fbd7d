//! Label selectors over pods and namespaces (`metav1.LabelSelector`), with upstream
//! `LabelSelectorAsSelector` semantics.
//!
//! The rules that matter and are easy to get wrong:
//! - a missing selector (`None`) selects **nothing**; a present but empty one selects **everything**;
//! - `matchLabels` and `matchExpressions` are ANDed;
//! - `NotIn` and `DoesNotExist` match objects without the key;
//! - a selector that does not parse is an error for the pod being scheduled (its terms are validated
//!   once, and the error names the offending field), while for pods already placed it simply matches
//!   nothing ([`api_selector_matches`]), because those are evaluated per pod in hot loops and the API
//!   server validated them anyway.
//!
//! [`LabelSelector`] is the parsed form, built once per scheduling attempt; [`api_selector_matches`]
//! evaluates an API object directly without allocating, for the terms of existing pods.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector as ApiLabelSelector, LabelSelectorRequirement,
};

use crate::helper::{
    aggregate_text, go_string_slice, invalid, label_value_errors, qualified_name_errors, quote,
};

/// Object labels.
pub(crate) type Labels = BTreeMap<String, String>;

/// Labels of nothing: what an object without `metadata.labels` has.
pub(crate) static NO_LABELS: Labels = BTreeMap::new();

/// A requirement operator. `matchLabels` entries become `In` with one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl Operator {
    fn parse(s: &str) -> Option<Operator> {
        match s {
            "In" => Some(Operator::In),
            "NotIn" => Some(Operator::NotIn),
            "Exists" => Some(Operator::Exists),
            "DoesNotExist" => Some(Operator::DoesNotExist),
            _ => None,
        }
    }

    fn matches(self, value: Option<&String>, values: &[String]) -> bool {
        match self {
            Operator::In => value.is_some_and(|v| values.contains(v)),
            Operator::NotIn => value.is_none_or(|v| !values.contains(v)),
            Operator::Exists => value.is_some(),
            Operator::DoesNotExist => value.is_none(),
        }
    }
}

/// One parsed requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Requirement {
    pub(crate) key: String,
    pub(crate) op: Operator,
    pub(crate) values: Vec<String>,
}

impl Requirement {
    /// `key = value`.
    pub(crate) fn equals(key: &str, value: &str) -> Self {
        Requirement {
            key: key.to_string(),
            op: Operator::In,
            values: vec![value.to_string()],
        }
    }

    /// `key != value` (matches objects without the key too).
    pub(crate) fn not_equals(key: &str, value: &str) -> Self {
        Requirement {
            key: key.to_string(),
            op: Operator::NotIn,
            values: vec![value.to_string()],
        }
    }

    fn matches(&self, labels: &Labels) -> bool {
        self.op.matches(labels.get(&self.key), &self.values)
    }

    /// Upstream `labels.NewRequirement` validation: the key must be a qualified name, the values
    /// valid label values, and their number must suit the operator.
    fn parse(key: &str, op: Operator, values: Vec<String>) -> Result<Self, LabelSelectorError> {
        let mut errs = Vec::new();
        let key_errs = qualified_name_errors(key);
        if !key_errs.is_empty() {
            errs.push(invalid("key", quote(key), key_errs.join("; ")));
        }
        match op {
            Operator::In | Operator::NotIn if values.is_empty() => errs.push(invalid(
                "values",
                go_string_slice(&values),
                "for 'in', 'notin' operators, values set can't be empty",
            )),
            Operator::Exists | Operator::DoesNotExist if !values.is_empty() => errs.push(invalid(
                "values",
                go_string_slice(&values),
                "values set must be empty for exists and does not exist",
            )),
            _ => {}
        }
        for (i, v) in values.iter().enumerate() {
            let v_errs = label_value_errors(v);
            if !v_errs.is_empty() {
                errs.push(invalid(&format!("values[{i}]"), quote(v), v_errs.join("; ")));
            }
        }
        if !errs.is_empty() {
            return Err(LabelSelectorError::Requirement(errs));
        }
        Ok(Requirement {
            key: key.to_string(),
            op,
            values,
        })
    }
}

/// A label selector that cannot be parsed; the texts are upstream's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum LabelSelectorError {
    /// An operator other than `In`, `NotIn`, `Exists` and `DoesNotExist`.
    #[error("{0:?} is not a valid label selector operator")]
    Operator(String),
    /// A requirement's field errors (key, values), printed as upstream's aggregate error.
    #[error("{}", aggregate_text(.0))]
    Requirement(Vec<String>),
}

/// A parsed label selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum LabelSelector {
    /// Selects nothing (a missing selector).
    Nothing,
    /// Selects objects meeting every requirement; no requirements selects everything.
    All(Vec<Requirement>),
}

impl LabelSelector {
    /// Selects everything.
    pub(crate) fn everything() -> Self {
        LabelSelector::All(Vec::new())
    }

    /// Upstream `LabelSelectorAsSelector`: `None` selects nothing, an empty selector everything;
    /// the first invalid requirement is the error.
    pub(crate) fn parse(selector: Option<&ApiLabelSelector>) -> Result<Self, LabelSelectorError> {
        let Some(sel) = selector else {
            return Ok(LabelSelector::Nothing);
        };
        let mut reqs = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            reqs.push(Requirement::parse(k, Operator::In, vec![v.clone()])?);
        }
        for e in sel.match_expressions.iter().flatten() {
            let op = Operator::parse(&e.operator)
                .ok_or_else(|| LabelSelectorError::Operator(e.operator.clone()))?;
            reqs.push(Requirement::parse(
                &e.key,
                op,
                e.values.clone().unwrap_or_default(),
            )?);
        }
        Ok(LabelSelector::All(reqs))
    }

    /// `key = value` for every entry (upstream `SelectorFromSet`).
    pub(crate) fn from_set<'a>(set: impl IntoIterator<Item = (&'a String, &'a String)>) -> Self {
        LabelSelector::All(set.into_iter().map(|(k, v)| Requirement::equals(k, v)).collect())
    }

    /// True when the selector selects everything (upstream `Selector.Empty()`).
    pub(crate) fn is_everything(&self) -> bool {
        matches!(self, LabelSelector::All(r) if r.is_empty())
    }

    /// Adds requirements (ANDed). A selector of nothing stays one.
    pub(crate) fn add(&mut self, extra: impl IntoIterator<Item = Requirement>) {
        if let LabelSelector::All(reqs) = self {
            reqs.extend(extra);
        }
    }

    /// True when `labels` are selected.
    pub(crate) fn matches(&self, labels: &Labels) -> bool {
        match self {
            LabelSelector::Nothing => false,
            LabelSelector::All(reqs) => reqs.iter().all(|r| r.matches(labels)),
        }
    }
}

/// Evaluates an API selector without parsing it: `None` selects nothing, an empty selector
/// everything, an unknown operator nothing.
pub(crate) fn api_selector_matches(selector: Option<&ApiLabelSelector>, labels: &Labels) -> bool {
    let Some(sel) = selector else { return false };
    if sel
        .match_labels
        .iter()
        .flatten()
        .any(|(k, v)| labels.get(k) != Some(v))
    {
        return false;
    }
    sel.match_expressions
        .iter()
        .flatten()
        .all(|r| api_requirement_matches(r, labels))
}

fn api_requirement_matches(r: &LabelSelectorRequirement, labels: &Labels) -> bool {
    Operator::parse(&r.operator)
        .is_some_and(|op| op.matches(labels.get(&r.key), r.values.as_deref().unwrap_or_default()))
}

/// True when the API selector has neither `matchLabels` nor `matchExpressions` (selects everything).
pub(crate) fn api_selector_is_empty(selector: &ApiLabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

/// An object's labels, empty when it has none.
pub(crate) fn labels_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &Labels {
    meta.labels.as_ref().unwrap_or(&NO_LABELS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_string(),
            operator: op.to_string(),
            values: Some(values.iter().map(|v| v.to_string()).collect())
                .filter(|v: &Vec<String>| !v.is_empty()),
        }
    }

    fn sel(ml: &[(&str, &str)], exprs: Vec<LabelSelectorRequirement>) -> ApiLabelSelector {
        ApiLabelSelector {
            match_labels: Some(labels(ml)).filter(|m| !m.is_empty()),
            match_expressions: Some(exprs).filter(|e| !e.is_empty()),
        }
    }

    #[test]
    fn matching_table() {
        struct Case {
            name: &'static str,
            selector: Option<ApiLabelSelector>,
            labels: Labels,
            want: bool,
        }
        let obj = || labels(&[("app", "web"), ("tier", "front"), ("canary", "")]);
        let cases = [
            Case {
                name: "missing selects nothing",
                selector: None,
                labels: obj(),
                want: false,
            },
            Case {
                name: "empty selects everything",
                selector: Some(sel(&[], vec![])),
                labels: obj(),
                want: true,
            },
            Case {
                name: "empty selects unlabelled",
                selector: Some(sel(&[], vec![])),
                labels: Labels::new(),
                want: true,
            },
            Case {
                name: "matchLabels",
                selector: Some(sel(&[("app", "web")], vec![])),
                labels: obj(),
                want: true,
            },
            Case {
                name: "matchLabels mismatch",
                selector: Some(sel(&[("app", "db")], vec![])),
                labels: obj(),
                want: false,
            },
            Case {
                name: "In",
                selector: Some(sel(&[], vec![expr("tier", "In", &["back", "front"])])),
                labels: obj(),
                want: true,
            },
            Case {
                name: "NotIn with absent key",
                selector: Some(sel(&[], vec![expr("zone", "NotIn", &["a"])])),
                labels: obj(),
                want: true,
            },
            Case {
                name: "NotIn with the value",
                selector: Some(sel(&[], vec![expr("tier", "NotIn", &["front"])])),
                labels: obj(),
                want: false,
            },
            Case {
                name: "Exists empty value",
                selector: Some(sel(&[], vec![expr("canary", "Exists", &[])])),
                labels: obj(),
                want: true,
            },
            Case {
                name: "DoesNotExist",
                selector: Some(sel(&[], vec![expr("canary", "DoesNotExist", &[])])),
                labels: obj(),
                want: false,
            },
            Case {
                name: "labels and expressions ANDed",
                selector: Some(sel(&[("app", "web")], vec![expr("tier", "In", &["back"])])),
                labels: obj(),
                want: false,
            },
            Case {
                name: "unknown operator",
                selector: Some(sel(&[], vec![expr("tier", "Near", &["front"])])),
                labels: obj(),
                want: false,
            },
        ];
        for c in cases {
            assert_eq!(
                api_selector_matches(c.selector.as_ref(), &c.labels),
                c.want,
                "direct: {}",
                c.name
            );
            match LabelSelector::parse(c.selector.as_ref()) {
                Ok(parsed) => assert_eq!(parsed.matches(&c.labels), c.want, "parsed: {}", c.name),
                Err(e) => assert!(!c.want, "{}: {e}", c.name),
            }
        }
    }

    #[test]
    fn parse_errors_as_upstream() {
        struct Case {
            name: &'static str,
            selector: ApiLabelSelector,
            want: &'static str,
        }
        let cases = [
            Case {
                name: "operator",
                selector: sel(&[], vec![expr("app", "Near", &["x"])]),
                want: "\"Near\" is not a valid label selector operator",
            },
            Case {
                name: "In without values",
                selector: sel(&[], vec![expr("app", "In", &[])]),
                want: "values: Invalid value: []string{}: for 'in', 'notin' operators, values set can't be empty",
            },
            Case {
                name: "Exists with values",
                selector: sel(&[], vec![expr("app", "Exists", &["x"])]),
                want: "values: Invalid value: []string{\"x\"}: values set must be empty for exists and does not exist",
            },
            Case {
                name: "bad key",
                selector: sel(&[], vec![expr("-app", "Exists", &[])]),
                want: "key: Invalid value: \"-app\": name part must consist of alphanumeric characters",
            },
            Case {
                name: "bad matchLabels value",
                selector: sel(&[("app", "a b")], vec![]),
                want: "values[0]: Invalid value: \"a b\": a valid label must be an empty string",
            },
            Case {
                name: "two problems in one requirement",
                selector: sel(&[], vec![expr("-app", "In", &[])]),
                want: "[key: Invalid value: \"-app\"",
            },
        ];
        for c in cases {
            let err = LabelSelector::parse(Some(&c.selector)).unwrap_err().to_string();
            assert!(err.starts_with(c.want), "{}: {err}", c.name);
        }
    }

    #[test]
    fn add_and_everything() {
        let mut s = LabelSelector::parse(Some(&sel(&[], vec![]))).unwrap();
        assert!(s.is_everything());
        s.add([Requirement::equals("app", "web")]);
        assert!(!s.is_everything());
        assert!(s.matches(&labels(&[("app", "web")])));
        assert!(!s.matches(&labels(&[("app", "db")])));
        let mut nothing = LabelSelector::parse(None).unwrap();
        nothing.add([Requirement::not_equals("app", "db")]);
        assert_eq!(nothing, LabelSelector::Nothing, "nothing stays nothing");
        let set = labels(&[("a", "1"), ("b", "2")]);
        let from = LabelSelector::from_set(&set);
        assert!(from.matches(&labels(&[("a", "1"), ("b", "2"), ("c", "3")])));
        assert!(!from.matches(&labels(&[("a", "1")])));
        assert!(api_selector_is_empty(&sel(&[], vec![])));
        assert!(!api_selector_is_empty(&sel(&[("a", "1")], vec![])));
    }
}
