//! Small pieces shared by several plugins: score normalisation, argument decoding, upstream-style
//! field errors, name validation, and typed access to queueing-hint objects.

use std::fmt::Display;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::de::DeserializeOwned;
use unisched_framework::{EventObject, EventSide, NodeScore, PodInfo, QueueingHintError};

/// Rescales raw scores linearly so that the highest becomes `max_priority` (upstream
/// `DefaultNormalizeScore`). With `reverse`, the scale is flipped: the highest raw score gets 0 and
/// a raw 0 gets `max_priority`. When every raw score is 0, scores stay 0, or all become
/// `max_priority` when reversed.
pub fn default_normalize_score(max_priority: i64, reverse: bool, scores: &mut [NodeScore<'_>]) {
    let max = scores.iter().map(|s| s.score).max().unwrap_or(0).max(0);
    if max == 0 {
        if reverse {
            for s in scores.iter_mut() {
                s.score = max_priority;
            }
        }
        return;
    }
    for s in scores.iter_mut() {
        let scaled = max_priority.saturating_mul(s.score) / max;
        s.score = if reverse { max_priority - scaled } else { scaled };
    }
}

/// The `kubescheduler.config.k8s.io/v1` version every args object may name.
const ARGS_API_VERSION: &str = "kubescheduler.config.k8s.io/v1";

/// A plugin's `…Args` type: decodable from `pluginConfig[].args`, with optional `kind` and
/// `apiVersion` keys that must name it when present.
pub(crate) trait PluginArgs: DeserializeOwned + Default {
    /// The upstream kind, e.g. `NodeResourcesFitArgs`.
    const KIND: &'static str;
    /// The `kind` key, when given.
    fn kind(&self) -> Option<&str>;
    /// The `apiVersion` key, when given.
    fn api_version(&self) -> Option<&str>;
}

/// A plugin's `pluginConfig[].args` that cannot be used. Every message is upstream's text, since
/// users and tests match on it; field errors name the field relative to the args object.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PluginArgsError {
    /// The args do not decode as the plugin's args kind (unknown field, wrong type).
    #[error("decoding {kind}: {source}")]
    Decode {
        /// The args kind, e.g. `NodeResourcesFitArgs`.
        kind: &'static str,
        /// What the decoder said, naming the field.
        #[source]
        source: serde_json::Error,
    },
    /// The args name another kind.
    #[error("decoding {kind}: kind: Unsupported value: {given:?}: supported values: {kind:?}")]
    Kind {
        /// The plugin's args kind.
        kind: &'static str,
        /// The `kind` the args gave.
        given: String,
    },
    /// The args name an API version other than `kubescheduler.config.k8s.io/v1`.
    #[error(
        "decoding {kind}: apiVersion: Unsupported value: {given:?}: supported values: {ARGS_API_VERSION:?}"
    )]
    ApiVersion {
        /// The plugin's args kind.
        kind: &'static str,
        /// The `apiVersion` the args gave.
        given: String,
    },
    /// Values that decode but are invalid, as upstream's field errors (`path: Invalid value: …`),
    /// printed as upstream's aggregate error: one alone, several in brackets.
    #[error("{}", aggregate_text(.0))]
    Invalid(Vec<String>),
    /// A plugin without args got an args object with fields.
    #[error("plugin {plugin} takes no args, got field {field:?}")]
    UnexpectedField {
        /// The plugin.
        plugin: String,
        /// The first field given.
        field: String,
    },
    /// A plugin without args got something other than an object.
    #[error("plugin {plugin} takes no args, got {value}")]
    NotAnObject {
        /// The plugin.
        plugin: String,
        /// The value given, as JSON.
        value: String,
    },
    /// A scoring strategy type the plugin cannot score with.
    #[error("scoring strategy {0} is not supported")]
    UnsupportedStrategy(String),
}

impl PluginArgsError {
    /// The error as configuration field errors under `path` (the args object's own path, e.g.
    /// `profiles[0].pluginConfig[1].args`): each field error with its field's full path, any other
    /// error once, after the path.
    pub fn field_errors_under(&self, path: &str) -> Vec<String> {
        match self {
            PluginArgsError::Invalid(errs) => errs.iter().map(|e| format!("{path}.{e}")).collect(),
            other => vec![format!("{path}: {other}")],
        }
    }
}

/// Upstream's aggregate error text: one error alone, several in brackets.
pub(crate) fn aggregate_text(errs: &[String]) -> String {
    match errs {
        [one] => one.clone(),
        _ => format!("[{}]", errs.join(", ")),
    }
}

/// Decodes a plugin's args: `null` (no `pluginConfig` entry) gives the defaults; unknown fields
/// and wrong types are errors that name the field.
pub(crate) fn decode_args<T: PluginArgs>(args: &serde_json::Value) -> Result<T, PluginArgsError> {
    if args.is_null() {
        return Ok(T::default());
    }
    let kind = T::KIND;
    let decoded: T =
        serde_json::from_value(args.clone()).map_err(|source| PluginArgsError::Decode { kind, source })?;
    if let Some(given) = decoded.kind().filter(|k| *k != kind) {
        return Err(PluginArgsError::Kind {
            kind,
            given: given.to_string(),
        });
    }
    if let Some(given) = decoded.api_version().filter(|v| *v != ARGS_API_VERSION) {
        return Err(PluginArgsError::ApiVersion {
            kind,
            given: given.to_string(),
        });
    }
    Ok(decoded)
}

/// Validation errors as one result: `Ok` when there are none (see [`PluginArgsError::Invalid`]).
pub(crate) fn aggregate(errs: Vec<String>) -> Result<(), PluginArgsError> {
    if errs.is_empty() {
        Ok(())
    } else {
        Err(PluginArgsError::Invalid(errs))
    }
}

/// `path: Invalid value: value: detail`, upstream `field.Invalid`.
pub(crate) fn invalid(path: &str, value: impl Display, detail: impl Display) -> String {
    format!("{path}: Invalid value: {value}: {detail}")
}

/// A Go-`%q`-style quoted string for error messages.
pub(crate) fn quote(s: &str) -> String {
    format!("{s:?}")
}

/// A Go-`%#v`-style rendering of a string slice for error messages.
pub(crate) fn go_string_slice(values: &[String]) -> String {
    let inner: Vec<String> = values.iter().map(|v| quote(v)).collect();
    format!("[]string{{{}}}", inner.join(", "))
}

fn is_alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            is_alnum(*f) && is_alnum(*l) && b.iter().all(|c| is_alnum(*c) || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// A lowercase RFC 1123 subdomain.
fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            match (b.first(), b.last()) {
                (Some(f), Some(l)) => {
                    (f.is_ascii_lowercase() || f.is_ascii_digit())
                        && (l.is_ascii_lowercase() || l.is_ascii_digit())
                        && b.iter()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
                }
                _ => false,
            }
        })
}

const QUALIFIED_NAME_FMT: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end \
     with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is \
     '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

/// Upstream `IsQualifiedName`: the problems with `value` as a label key / resource name, empty when
/// it is valid.
pub(crate) fn qualified_name_errors(value: &str) -> Vec<String> {
    let parts: Vec<&str> = value.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => {
            return vec![format!(
                "a qualified name {QUALIFIED_NAME_FMT} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    let mut errs = Vec::new();
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !name.is_empty() && !is_qualified_name_part(name) {
        errs.push(format!("name part {QUALIFIED_NAME_FMT}"));
    }
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errs.push("prefix part must be non-empty".to_string());
        } else if !is_dns1123_subdomain(prefix) {
            errs.push(
                "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
                 '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used \
                 for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
                    .to_string(),
            );
        }
    }
    errs
}

/// Upstream `IsValidLabelValue`: the problems with `value` as a label value, empty when valid.
pub(crate) fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and \
             must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex \
             used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
                .to_string(),
        );
    }
    errs
}

/// The nodes of a node event: the old one (absent on Add) and the new one. A hint for a node event
/// that carries something else answers with an error, which the queue treats as `Queue`.
pub(crate) fn event_nodes<'a>(
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> Result<(Option<&'a Node>, &'a Node), QueueingHintError> {
    let old = match old {
        None => None,
        Some(EventObject::Node(n)) => Some(&**n),
        Some(other) => return Err(unexpected_object("Node", EventSide::Old, other)),
    };
    match new {
        Some(EventObject::Node(n)) => Ok((old, &**n)),
        Some(other) => Err(unexpected_object("Node", EventSide::New, other)),
        None => Err(QueueingHintError::MissingObject {
            expected: "Node",
            side: EventSide::New,
        }),
    }
}

/// The pods of a pod event: the old one (absent on Add) and the new one (absent on Delete). A
/// bound pod's `PodInfo` is lean: read its requests and host ports from the derived fields.
pub(crate) fn event_pods<'a>(
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> Result<(Option<&'a PodInfo>, Option<&'a PodInfo>), QueueingHintError> {
    let conv = |o: Option<&'a EventObject>, side: EventSide| match o {
        None => Ok(None),
        Some(EventObject::Pod(p)) => Ok(Some(&**p)),
        Some(other) => Err(unexpected_object("Pod", side, other)),
    };
    let old = conv(old, EventSide::Old)?;
    let new = conv(new, EventSide::New)?;
    if old.is_none() && new.is_none() {
        return Err(QueueingHintError::EmptyEvent { kind: "pod" });
    }
    Ok((old, new))
}

/// [`event_pods`] for hints that read only the pod objects' metadata and spec (labels,
/// tolerations, gates, volumes, affinity), never their containers.
pub(crate) fn event_pod_objects<'a>(
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> Result<(Option<&'a Pod>, Option<&'a Pod>), QueueingHintError> {
    let (old, new) = event_pods(old, new)?;
    Ok((old.map(|p| &*p.pod), new.map(|p| &*p.pod)))
}

/// A hint's error for an event object of another kind than `expected`.
pub(crate) fn unexpected_object(
    expected: &'static str,
    side: EventSide,
    got: &EventObject,
) -> QueueingHintError {
    QueueingHintError::UnexpectedObject {
        expected,
        side,
        got: object_kind(got),
    }
}

pub(crate) fn object_kind(o: &EventObject) -> &'static str {
    match o {
        EventObject::Pod(_) => "Pod",
        EventObject::Node(_) => "Node",
        EventObject::ResourceClaim(_) => "ResourceClaim",
        EventObject::ResourceSlice(_) => "ResourceSlice",
        EventObject::DeviceClass(_) => "DeviceClass",
        EventObject::PersistentVolume(_) => "PersistentVolume",
        EventObject::PersistentVolumeClaim(_) => "PersistentVolumeClaim",
        EventObject::StorageClass(_) => "StorageClass",
        EventObject::CsiNode(_) => "CSINode",
        EventObject::CsiDriver(_) => "CSIDriver",
        EventObject::CsiStorageCapacity(_) => "CSIStorageCapacity",
        EventObject::VolumeAttachment(_) => "VolumeAttachment",
        EventObject::PodGroup(_) => "PodGroup",
        EventObject::CompositePodGroup(_) => "CompositePodGroup",
        EventObject::Other => "another object",
    }
}

/// Bound to a node, or nominated to one: a pod the filters count on a node (pods of lower or
/// equal priority count a nominated pod as if it were bound), so its deletion or change can help
/// others, as upstream's hints treat it.
pub(crate) fn bound_or_nominated(pod: &Pod) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let nominated = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    bound || nominated
}

/// The UID of a pod, or `namespace/name` when it has none (as `PodInfo` keys pods).
pub(crate) fn pod_key(pod: &Pod) -> String {
    match pod.metadata.uid.as_deref() {
        Some(u) if !u.is_empty() => u.to_string(),
        _ => format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default()
        ),
    }
}

/// The pod's tolerations (empty when none).
pub(crate) fn tolerations(pod: &Pod) -> &[k8s_openapi::api::core::v1::Toleration] {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or(&[])
}

/// The node's taints (empty when none).
pub(crate) fn taints(node: &Node) -> &[k8s_openapi::api::core::v1::Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_table() {
        struct Case {
            name: &'static str,
            reverse: bool,
            raw: Vec<i64>,
            want: Vec<i64>,
        }
        let cases = [
            Case {
                name: "scales to max",
                reverse: false,
                raw: vec![1, 2, 4],
                want: vec![25, 50, 100],
            },
            Case {
                name: "reverse",
                reverse: true,
                raw: vec![0, 1, 2],
                want: vec![100, 50, 0],
            },
            Case {
                name: "all zero",
                reverse: false,
                raw: vec![0, 0],
                want: vec![0, 0],
            },
            Case {
                name: "all zero reversed",
                reverse: true,
                raw: vec![0, 0],
                want: vec![100, 100],
            },
            Case {
                name: "integer division",
                reverse: false,
                raw: vec![1, 3],
                want: vec![33, 100],
            },
            Case {
                name: "empty",
                reverse: true,
                raw: vec![],
                want: vec![],
            },
        ];
        for c in cases {
            let names: Vec<String> = (0..c.raw.len()).map(|i| format!("n{i}")).collect();
            let mut scores: Vec<NodeScore<'_>> = c
                .raw
                .iter()
                .zip(&names)
                .map(|(s, name)| NodeScore { name, score: *s })
                .collect();
            default_normalize_score(100, c.reverse, &mut scores);
            let got: Vec<i64> = scores.iter().map(|s| s.score).collect();
            assert_eq!(got, c.want, "{}", c.name);
        }
    }

    #[test]
    fn name_validation_table() {
        struct Case {
            name: &'static str,
            value: &'static str,
            qualified_ok: bool,
            label_value_ok: bool,
        }
        let cases = [
            Case {
                name: "plain",
                value: "cpu",
                qualified_ok: true,
                label_value_ok: true,
            },
            Case {
                name: "prefixed",
                value: "example.com/gpu",
                qualified_ok: true,
                label_value_ok: false,
            },
            Case {
                name: "empty",
                value: "",
                qualified_ok: false,
                label_value_ok: true,
            },
            Case {
                name: "two slashes",
                value: "a/b/c",
                qualified_ok: false,
                label_value_ok: false,
            },
            Case {
                name: "upper prefix",
                value: "Example.com/gpu",
                qualified_ok: false,
                label_value_ok: false,
            },
            Case {
                name: "leading dash",
                value: "-x",
                qualified_ok: false,
                label_value_ok: false,
            },
            Case {
                name: "too long",
                value: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                qualified_ok: false,
                label_value_ok: false,
            },
        ];
        for c in cases {
            assert_eq!(
                qualified_name_errors(c.value).is_empty(),
                c.qualified_ok,
                "{}",
                c.name
            );
            assert_eq!(
                label_value_errors(c.value).is_empty(),
                c.label_value_ok,
                "{}",
                c.name
            );
        }
    }

    #[test]
    fn aggregate_formats_like_upstream() {
        let text = |errs: Vec<String>| aggregate(errs).map_err(|e| e.to_string());
        assert_eq!(text(vec![]), Ok(()));
        assert_eq!(text(vec!["a".into()]), Err("a".into()));
        assert_eq!(text(vec!["a".into(), "b".into()]), Err("[a, b]".into()));
    }
}
