//! Label and field selectors in the Kubernetes query-string syntax.
//!
//! Label selectors: `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k`, `!k`, `k>1`, `k<1`,
//! comma-separated (AND). Field selectors: `path=v`, `path==v`, `path!=v`, comma-separated (AND),
//! where `path` is any dotted path into the object (`metadata.name`, `spec.nodeName`, `status.phase`,
//! `involvedObject.uid`, …); a missing field reads as the empty string.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::error::StoreError;

/// A label-selector operator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LabelOp {
    /// `k=v`, `k==v`.
    Equals,
    /// `k!=v` (also true when the label is absent).
    NotEquals,
    /// `k in (…)`.
    In,
    /// `k notin (…)` (also true when the label is absent).
    NotIn,
    /// `k`.
    Exists,
    /// `!k`.
    DoesNotExist,
    /// `k>n` (integer comparison).
    GreaterThan,
    /// `k<n` (integer comparison).
    LessThan,
}

/// One label requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelRequirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub op: LabelOp,
    /// Values (one for equality operators, any number for set operators, none for existence).
    pub values: Vec<String>,
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// All must hold.
    pub requirements: Vec<LabelRequirement>,
}

fn bad(msg: String) -> StoreError {
    StoreError::BadRequest(msg)
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'))
}

fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

impl LabelSelector {
    /// Parses the query-string form.
    pub fn parse(s: &str) -> Result<Self, StoreError> {
        let mut requirements = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { requirements });
        }
        for part in split_top_level(s) {
            let part = part.trim();
            if part.is_empty() {
                return Err(bad(format!(
                    "unable to parse requirement: found '', expected: identifier in {s:?}"
                )));
            }
            requirements.push(Self::parse_one(part, s)?);
        }
        Ok(Self { requirements })
    }

    fn parse_one(part: &str, whole: &str) -> Result<LabelRequirement, StoreError> {
        if let Some(rest) = part.strip_prefix('!') {
            let key = rest.trim();
            if !valid_key(key) {
                return Err(bad(format!("invalid label key {key:?} in selector {whole:?}")));
            }
            return Ok(LabelRequirement {
                key: key.into(),
                op: LabelOp::DoesNotExist,
                values: vec![],
            });
        }
        let key_end = part
            .find(|c: char| c.is_whitespace() || matches!(c, '=' | '!' | '<' | '>'))
            .unwrap_or(part.len());
        let key = &part[..key_end];
        if !valid_key(key) {
            return Err(bad(format!("invalid label key {key:?} in selector {whole:?}")));
        }
        let rest = part[key_end..].trim_start();
        let (op, value_text) = if rest.is_empty() {
            return Ok(LabelRequirement {
                key: key.into(),
                op: LabelOp::Exists,
                values: vec![],
            });
        } else if let Some(v) = rest.strip_prefix("==") {
            (LabelOp::Equals, v)
        } else if let Some(v) = rest.strip_prefix("!=") {
            (LabelOp::NotEquals, v)
        } else if let Some(v) = rest.strip_prefix('=') {
            (LabelOp::Equals, v)
        } else if let Some(v) = rest.strip_prefix('>') {
            (LabelOp::GreaterThan, v)
        } else if let Some(v) = rest.strip_prefix('<') {
            (LabelOp::LessThan, v)
        } else if let Some(v) = rest.strip_prefix("notin") {
            (LabelOp::NotIn, v)
        } else if let Some(v) = rest.strip_prefix("in") {
            (LabelOp::In, v)
        } else {
            return Err(bad(format!(
                "unable to parse requirement {part:?} in selector {whole:?}"
            )));
        };
        let value_text = value_text.trim();
        let values = match op {
            LabelOp::In | LabelOp::NotIn => {
                let inner = value_text
                    .strip_prefix('(')
                    .and_then(|v| v.strip_suffix(')'))
                    .ok_or_else(|| {
                        bad(format!(
                            "expected a parenthesised set in {part:?} of selector {whole:?}"
                        ))
                    })?;
                inner
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect()
            }
            LabelOp::GreaterThan | LabelOp::LessThan => {
                if value_text.parse::<i64>().is_err() {
                    return Err(bad(format!(
                        "for 'Gt', 'Lt' operators, the value must be an integer in {whole:?}"
                    )));
                }
                vec![value_text.to_string()]
            }
            _ => vec![value_text.to_string()],
        };
        Ok(LabelRequirement {
            key: key.into(),
            op,
            values,
        })
    }

    /// Builds a selector from a `metav1.LabelSelector` JSON object (`matchLabels`, `matchExpressions`).
    pub fn from_label_selector(sel: &Value) -> Result<Self, StoreError> {
        let mut requirements = Vec::new();
        if let Some(ml) = sel.get("matchLabels").and_then(Value::as_object) {
            for (k, v) in ml {
                requirements.push(LabelRequirement {
                    key: k.clone(),
                    op: LabelOp::Equals,
                    values: vec![v.as_str().unwrap_or_default().to_string()],
                });
            }
        }
        if let Some(exprs) = sel.get("matchExpressions").and_then(Value::as_array) {
            for e in exprs {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                    .unwrap_or_default();
                let op = match e.get("operator").and_then(Value::as_str).unwrap_or_default() {
                    "In" => LabelOp::In,
                    "NotIn" => LabelOp::NotIn,
                    "Exists" => LabelOp::Exists,
                    "DoesNotExist" => LabelOp::DoesNotExist,
                    other => return Err(bad(format!("{other:?} is not a valid label selector operator"))),
                };
                requirements.push(LabelRequirement { key, op, values });
            }
        }
        Ok(Self { requirements })
    }

    /// Whether the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Matches a label map (`metadata.labels`).
    pub fn matches_labels(&self, labels: Option<&serde_json::Map<String, Value>>) -> bool {
        self.requirements.iter().all(|r| {
            let v = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
            match r.op {
                LabelOp::Equals => v == r.values.first().map(String::as_str),
                LabelOp::NotEquals => v != r.values.first().map(String::as_str),
                LabelOp::In => v.is_some_and(|v| r.values.iter().any(|x| x == v)),
                LabelOp::NotIn => v.is_none_or(|v| !r.values.iter().any(|x| x == v)),
                LabelOp::Exists => v.is_some(),
                LabelOp::DoesNotExist => v.is_none(),
                LabelOp::GreaterThan | LabelOp::LessThan => {
                    let (Some(have), Some(want)) = (
                        v.and_then(|v| v.parse::<i64>().ok()),
                        r.values.first().and_then(|v| v.parse::<i64>().ok()),
                    ) else {
                        return false;
                    };
                    if r.op == LabelOp::GreaterThan {
                        have > want
                    } else {
                        have < want
                    }
                }
            }
        })
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches(&self, obj: &Value) -> bool {
        if self.requirements.is_empty() {
            return true;
        }
        self.matches_labels(
            obj.get("metadata")
                .and_then(|m| m.get("labels"))
                .and_then(Value::as_object),
        )
    }

    /// Matches a plain label map.
    pub fn matches_map(&self, labels: &BTreeMap<String, String>) -> bool {
        let m: serde_json::Map<String, Value> = labels
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect();
        self.matches_labels(Some(&m))
    }
}

/// One field requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    /// Dotted path, e.g. `spec.nodeName`.
    pub path: Vec<String>,
    /// `!=` when true, `=`/`==` otherwise.
    pub negated: bool,
    /// The value compared with.
    pub value: String,
}

/// A parsed field selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    /// All must hold.
    pub requirements: Vec<FieldRequirement>,
}

fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            cur.push('\\');
            cur.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == sep {
            out.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    if escaped {
        cur.push('\\');
    }
    out.push(cur);
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            out.push(c);
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else {
            out.push(c);
        }
    }
    out
}

impl FieldSelector {
    /// Parses the query-string form.
    pub fn parse(s: &str) -> Result<Self, StoreError> {
        let mut requirements = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self { requirements });
        }
        for part in split_unescaped(s, ',') {
            let part = part.trim();
            let (field, negated, value) = if let Some(i) = part.find("!=") {
                (&part[..i], true, &part[i + 2..])
            } else if let Some(i) = part.find("==") {
                (&part[..i], false, &part[i + 2..])
            } else if let Some(i) = part.find('=') {
                (&part[..i], false, &part[i + 1..])
            } else {
                return Err(bad(format!("invalid selector: '{s}'; can't understand '{part}'")));
            };
            let field = field.trim();
            if field.is_empty() || field.split('.').any(str::is_empty) {
                return Err(bad(format!("field label not supported: {field:?}")));
            }
            requirements.push(FieldRequirement {
                path: field.split('.').map(str::to_string).collect(),
                negated,
                value: unescape(value.trim()),
            });
        }
        Ok(Self { requirements })
    }

    /// Whether the selector matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Matches an object.
    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements.iter().all(|r| {
            let have = field_value(obj, &r.path);
            (have == r.value) != r.negated
        })
    }

    /// The value of a `metadata.name=` requirement, if there is one (lets a watch or list jump to a key).
    pub fn exact_name(&self) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| !r.negated && r.path.len() == 2 && r.path[0] == "metadata" && r.path[1] == "name")
            .map(|r| r.value.as_str())
    }
}

fn field_value(obj: &Value, path: &[String]) -> String {
    let mut cur = obj;
    for p in path {
        match cur.get(p.as_str()) {
            Some(v) => cur = v,
            None => {
                // Kubernetes exposes unset booleans as "false".
                if path.last().is_some_and(|l| l == "unschedulable") {
                    return "false".into();
                }
                return String::new();
            }
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": labels},
               "spec": {"nodeName": "n1", "schedulerName": "unisched"}, "status": {"phase": "Running"}})
    }

    #[test]
    fn label_selector_operators() {
        let o = obj(json!({"app": "web", "tier": "fe", "n": "5"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(&o);
        assert!(m(""));
        assert!(m("app=web"));
        assert!(m("app==web"));
        assert!(!m("app!=web"));
        assert!(m("missing!=x"));
        assert!(m("app in (web, db)"));
        assert!(m("app in(web)"));
        assert!(!m("app notin (web)"));
        assert!(m("missing notin (web)"));
        assert!(m("tier"));
        assert!(m("!missing"));
        assert!(!m("!tier"));
        assert!(m("app=web,tier in (fe,be),!missing"));
        assert!(!m("app=web,tier=be"));
        assert!(m("n>4"));
        assert!(!m("n<4"));
        assert!(LabelSelector::parse("app in web").is_err());
        assert!(LabelSelector::parse("=x").is_err());
        assert!(LabelSelector::parse("a,,b").is_err());
    }

    #[test]
    fn label_selector_struct() {
        let sel = LabelSelector::from_label_selector(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe"]}]
        }))
        .unwrap();
        assert!(sel.matches(&obj(json!({"app": "web", "tier": "fe"}))));
        assert!(!sel.matches(&obj(json!({"app": "web"}))));
    }

    #[test]
    fn field_selector() {
        let o = obj(json!({}));
        let m = |s: &str| FieldSelector::parse(s).unwrap().matches(&o);
        assert!(m("metadata.name=a"));
        assert!(m("metadata.namespace==ns"));
        assert!(m("spec.nodeName!="));
        assert!(!m("spec.nodeName="));
        assert!(m(
            "spec.schedulerName=unisched,status.phase!=Succeeded,status.phase!=Failed"
        ));
        assert!(!m("status.phase=Pending"));
        assert!(m("spec.unknown="));
        assert!(m("spec.unschedulable=false"));
        assert!(FieldSelector::parse("nonsense").is_err());
        assert_eq!(
            FieldSelector::parse("metadata.name=x").unwrap().exact_name(),
            Some("x")
        );
        let esc = FieldSelector::parse(r"metadata.name=a\,b").unwrap();
        assert_eq!(esc.requirements[0].value, "a,b");
    }
}
