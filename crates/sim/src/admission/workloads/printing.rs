//! How kube-apiserver prints a template that is the "bad value" of a cause.
//!
//! A cause's message shows a structured bad value as Go's JSON encoding of the Go value at fault,
//! so two encodings of the same template show up in answers about Workloads:
//!
//! - the declarative duplicate check reports the whole `scheduling.k8s.io/v1beta1` list entry:
//!   wire field names in declaration order, with `omitempty` fields left out when empty (and
//!   `schedulingConstraints` of a PodGroupTemplate, which has no `omitempty`, printed as `null`);
//! - the hand-written depth check reports a list of the API server's internal templates, which
//!   carry no JSON tags: every field is printed, under its Go name, `null` or `""` when unset.
//!
//! Both come from one description of each type's fields ([`Field`]), so the two encodings cannot
//! drift apart.

use serde_json::Value;

/// What a field holds.
#[derive(Clone, Copy)]
enum Shape {
    /// A string.
    Text,
    /// An `int32`.
    Number,
    /// A nested object.
    Object(fn() -> &'static [Field]),
    /// A list of objects.
    List(fn() -> &'static [Field]),
}

/// One field of a Go struct, as both encodings see it.
#[derive(Clone, Copy)]
struct Field {
    /// The wire (JSON) name.
    wire: &'static str,
    /// The Go field name (the internal type's encoding).
    go: &'static str,
    shape: Shape,
    /// A Go pointer: `null` (or left out) when unset, rather than its zero value.
    pointer: bool,
    /// The wire tag has `omitempty`.
    omit_empty: bool,
}

const fn field(wire: &'static str, go: &'static str, shape: Shape, pointer: bool, omit_empty: bool) -> Field {
    Field {
        wire,
        go,
        shape,
        pointer,
        omit_empty,
    }
}

fn nothing() -> &'static [Field] {
    &[]
}

fn gang() -> &'static [Field] {
    const F: &[Field] = &[field("minCount", "MinCount", Shape::Number, false, false)];
    F
}

fn composite_gang() -> &'static [Field] {
    const F: &[Field] = &[field(
        "minGroupCount",
        "MinGroupCount",
        Shape::Number,
        false,
        false,
    )];
    F
}

fn policy() -> &'static [Field] {
    const F: &[Field] = &[
        field("basic", "Basic", Shape::Object(nothing), true, true),
        field("gang", "Gang", Shape::Object(gang), true, true),
    ];
    F
}

fn composite_policy() -> &'static [Field] {
    const F: &[Field] = &[
        field("basic", "Basic", Shape::Object(nothing), true, true),
        field("gang", "Gang", Shape::Object(composite_gang), true, true),
    ];
    F
}

fn topology_constraint() -> &'static [Field] {
    const F: &[Field] = &[field("key", "Key", Shape::Text, false, false)];
    F
}

fn constraints() -> &'static [Field] {
    const F: &[Field] = &[field(
        "topology",
        "Topology",
        Shape::List(topology_constraint),
        false,
        true,
    )];
    F
}

fn disruption_mode() -> &'static [Field] {
    const F: &[Field] = &[
        field("single", "Single", Shape::Object(nothing), true, true),
        field("all", "All", Shape::Object(nothing), true, true),
    ];
    F
}

fn resource_claim() -> &'static [Field] {
    const F: &[Field] = &[
        field("name", "Name", Shape::Text, false, false),
        field("resourceClaimName", "ResourceClaimName", Shape::Text, true, true),
        field(
            "resourceClaimTemplateName",
            "ResourceClaimTemplateName",
            Shape::Text,
            true,
            true,
        ),
    ];
    F
}

/// A `PodGroupTemplate`'s fields.
fn pod_group_template() -> &'static [Field] {
    const F: &[Field] = &[
        field("name", "Name", Shape::Text, false, false),
        field(
            "schedulingPolicy",
            "SchedulingPolicy",
            Shape::Object(policy),
            false,
            false,
        ),
        field(
            "schedulingConstraints",
            "SchedulingConstraints",
            Shape::Object(constraints),
            true,
            false,
        ),
        field(
            "resourceClaims",
            "ResourceClaims",
            Shape::List(resource_claim),
            false,
            true,
        ),
        field(
            "disruptionMode",
            "DisruptionMode",
            Shape::Object(disruption_mode),
            true,
            true,
        ),
        field("priorityClassName", "PriorityClassName", Shape::Text, false, true),
        field("priority", "Priority", Shape::Number, true, true),
        field("preemptionPolicy", "PreemptionPolicy", Shape::Text, true, true),
    ];
    F
}

/// A `CompositePodGroupTemplate`'s fields.
fn composite_template() -> &'static [Field] {
    const F: &[Field] = &[
        field("name", "Name", Shape::Text, false, false),
        field(
            "schedulingPolicy",
            "SchedulingPolicy",
            Shape::Object(composite_policy),
            false,
            false,
        ),
        field(
            "schedulingConstraints",
            "SchedulingConstraints",
            Shape::Object(constraints),
            true,
            true,
        ),
        field(
            "disruptionMode",
            "DisruptionMode",
            Shape::Object(disruption_mode),
            true,
            true,
        ),
        field("priorityClassName", "PriorityClassName", Shape::Text, false, true),
        field("priority", "Priority", Shape::Number, true, true),
        field("preemptionPolicy", "PreemptionPolicy", Shape::Text, true, true),
        field(
            "podGroupTemplates",
            "PodGroupTemplates",
            Shape::List(pod_group_template),
            false,
            true,
        ),
        field(
            "compositePodGroupTemplates",
            "CompositePodGroupTemplates",
            Shape::List(composite_template),
            false,
            true,
        ),
    ];
    F
}

/// Which of the two encodings to write.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    /// The `v1beta1` type: wire names, `omitempty` honoured.
    Wire,
    /// The internal type: Go names, every field.
    Internal,
}

/// A string as Go's encoder writes it (which escapes `<`, `>` and `&` for HTML).
fn go_string(s: &str) -> String {
    Value::String(s.to_string())
        .to_string()
        .replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
        .replace('\u{2028}', "\\u2028")
        .replace('\u{2029}', "\\u2029")
}

fn write_object(out: &mut String, value: Option<&Value>, fields: &[Field], encoding: Encoding) {
    out.push('{');
    let mut first = true;
    for f in fields {
        let v = value.and_then(|o| o.get(f.wire)).filter(|v| !v.is_null());
        let Some(text) = field_text(f, v, encoding) else {
            continue;
        };
        if !first {
            out.push(',');
        }
        first = false;
        let name = if encoding == Encoding::Wire { f.wire } else { f.go };
        out.push_str(&go_string(name));
        out.push(':');
        out.push_str(&text);
    }
    out.push('}');
}

/// The text of one field's value, or `None` when the encoding leaves it out.
fn field_text(f: &Field, v: Option<&Value>, encoding: Encoding) -> Option<String> {
    let omit_empty = encoding == Encoding::Wire && f.omit_empty;
    if f.pointer && v.is_none() {
        return (!omit_empty).then(|| "null".to_string());
    }
    match f.shape {
        Shape::Text => {
            let s = v.and_then(Value::as_str).unwrap_or_default();
            (!(omit_empty && !f.pointer && s.is_empty())).then(|| go_string(s))
        }
        Shape::Number => {
            let n = v.and_then(Value::as_i64).unwrap_or(0);
            (!(omit_empty && !f.pointer && n == 0)).then(|| n.to_string())
        }
        Shape::Object(fields) => {
            let mut out = String::new();
            write_object(&mut out, v, fields(), encoding);
            Some(out)
        }
        Shape::List(fields) => match v.and_then(Value::as_array) {
            None if omit_empty => None,
            None => Some("null".to_string()),
            Some(items) if items.is_empty() && omit_empty => None,
            Some(items) => Some(list_text(items, fields(), encoding)),
        },
    }
}

fn list_text(items: &[Value], fields: &[Field], encoding: Encoding) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_object(&mut out, Some(item), fields, encoding);
    }
    out.push(']');
    out
}

/// A `v1beta1` PodGroupTemplate as the duplicate check prints it.
pub(super) fn wire_pod_group_template(template: &Value) -> String {
    let mut out = String::new();
    write_object(&mut out, Some(template), pod_group_template(), Encoding::Wire);
    out
}

/// A `v1beta1` CompositePodGroupTemplate as the duplicate check prints it.
pub(super) fn wire_composite_template(template: &Value) -> String {
    let mut out = String::new();
    write_object(&mut out, Some(template), composite_template(), Encoding::Wire);
    out
}

/// A `v1beta1` PodGroupResourceClaim as the duplicate check prints it.
pub(super) fn wire_resource_claim(claim: &Value) -> String {
    let mut out = String::new();
    write_object(&mut out, Some(claim), resource_claim(), Encoding::Wire);
    out
}

/// A composite's child composites as the depth check prints them: the internal Go values, `null`
/// for a template without that list.
pub(super) fn internal_composite_list(children: Option<&Value>) -> String {
    match children.and_then(Value::as_array) {
        None => "null".to_string(),
        Some(items) => list_text(items, composite_template(), Encoding::Internal),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_wire_encoding_leaves_out_empty_optional_fields() {
        assert_eq!(
            wire_pod_group_template(&json!({"name": "a", "schedulingPolicy": {"gang": {"minCount": 2}}})),
            r#"{"name":"a","schedulingPolicy":{"gang":{"minCount":2}},"schedulingConstraints":null}"#
        );
        assert_eq!(
            wire_composite_template(&json!({
                "name": "c", "schedulingPolicy": {"basic": {}}, "priority": 0,
                "podGroupTemplates": [{"name": "l", "schedulingPolicy": {"basic": {}},
                                       "schedulingConstraints": {"topology": [{"key": "rack"}]}}]
            })),
            r#"{"name":"c","schedulingPolicy":{"basic":{}},"priority":0,"podGroupTemplates":[{"name":"l","schedulingPolicy":{"basic":{}},"schedulingConstraints":{"topology":[{"key":"rack"}]}}]}"#
        );
    }

    #[test]
    fn the_internal_encoding_prints_every_field_by_its_go_name() {
        assert_eq!(internal_composite_list(None), "null");
        assert_eq!(
            internal_composite_list(Some(
                &json!([{"name": "c<", "podGroupTemplates": [{"name": "l"}]}])
            )),
            concat!(
                r#"[{"Name":"c\u003c","SchedulingPolicy":{"Basic":null,"Gang":null},"SchedulingConstraints":null,"#,
                r#""DisruptionMode":null,"PriorityClassName":"","Priority":null,"PreemptionPolicy":null,"#,
                r#""PodGroupTemplates":[{"Name":"l","SchedulingPolicy":{"Basic":null,"Gang":null},"#,
                r#""SchedulingConstraints":null,"ResourceClaims":null,"DisruptionMode":null,"PriorityClassName":"","#,
                r#""Priority":null,"PreemptionPolicy":null}],"CompositePodGroupTemplates":null}]"#
            )
        );
    }
}
