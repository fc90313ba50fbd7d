//! The Workload rules on their own: the field rules of each template type, and how an update
//! ratchets. The HTTP answers (status, upstream's table) are in `tests/workloads.rs`.

use serde_json::{Value, json};

use super::*;

fn problems(spec: Value, old_spec: Option<Value>) -> Vec<String> {
    let mut causes = Vec::new();
    let old = old_spec.map(|s| json!({ "spec": s }));
    check_workload(&json!({ "spec": spec }), old.as_ref(), &mut causes);
    causes
        .into_iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect()
}

fn pod_groups(templates: Value) -> Value {
    json!({ "podGroupTemplates": templates })
}

#[test]
fn pod_group_template_fields() {
    let template = |extra: Value| {
        let mut t = json!({"name": "g", "schedulingPolicy": {"gang": {"minCount": 2}}});
        t.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        pod_groups(json!([t]))
    };
    assert!(
        problems(
            template(json!({
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}],
                "disruptionMode": {"all": {}},
                "priorityClassName": "high", "priority": 1000, "preemptionPolicy": "Never",
                "schedulingConstraints": {"topology": [{"key": "example.com/rack"}]},
            })),
            None
        )
        .is_empty()
    );
    assert_eq!(
        problems(
            template(json!({"schedulingPolicy": {"basic": {}, "gang": {"minCount": -1}}})),
            None
        ),
        [
            "spec.podGroupTemplates[0].schedulingPolicy: Invalid value: \"{basic, gang}\": must specify exactly one of: `basic`, `gang`",
            "spec.podGroupTemplates[0].schedulingPolicy.gang.minCount: Invalid value: -1: must be greater than or equal to 1",
        ]
    );
    assert_eq!(
        problems(
            template(json!({"resourceClaims": [
                {"name": "a", "resourceClaimName": "x", "resourceClaimTemplateName": "y"},
                {"name": "a"},
            ]})),
            None
        ),
        [
            r#"spec.podGroupTemplates[0].resourceClaims[1]: Duplicate value: {"name":"a"}"#,
            "spec.podGroupTemplates[0].resourceClaims[0]: Invalid value: \"{resourceClaimName, resourceClaimTemplateName}\": must specify exactly one of: `resourceClaimName`, `resourceClaimTemplateName`",
            "spec.podGroupTemplates[0].resourceClaims[1]: Invalid value: \"\": must specify one of: `resourceClaimName`, `resourceClaimTemplateName`",
        ]
    );
    assert_eq!(
        problems(
            template(
                json!({"resourceClaims": (0..5).map(|i| json!({"name": format!("c{i}"), "resourceClaimName": "x"})).collect::<Vec<_>>()})
            ),
            None
        ),
        ["spec.podGroupTemplates[0].resourceClaims: Too many: 5: must have at most 4 items"]
    );
    assert_eq!(
        problems(
            template(json!({
                "disruptionMode": {},
                "priorityClassName": "High", "priority": 1_000_000_001, "preemptionPolicy": "Sometimes",
                "schedulingConstraints": {"topology": [{"key": ""}]},
            })),
            None
        ),
        [
            "spec.podGroupTemplates[0].schedulingConstraints.topology[0].key: Required value",
            "spec.podGroupTemplates[0].disruptionMode: Invalid value: \"\": must specify one of: `single`, `all`",
            "spec.podGroupTemplates[0].priorityClassName: Invalid value: \"High\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            "spec.podGroupTemplates[0].priority: Invalid value: 1000000001: must be less than or equal to 1000000000",
            "spec.podGroupTemplates[0].preemptionPolicy: Unsupported value: \"Sometimes\": supported values: \"Never\", \"PreemptLowerPriority\"",
        ]
    );
    assert_eq!(
        problems(
            template(json!({"schedulingConstraints": {"topology": [{"key": "a"}, {"key": "b"}]}})),
            None
        ),
        ["spec.podGroupTemplates[0].schedulingConstraints.topology: Too many: 2: must have at most 1 item"]
    );
}

#[test]
fn the_controller_reference_is_checked_and_kept() {
    let spec = |reference: Value| json!({"controllerRef": reference, "podGroupTemplates": [{"name": "g", "schedulingPolicy": {"basic": {}}}]});
    assert_eq!(
        problems(
            spec(json!({"apiGroup": "Batch", "kind": "", "name": "a/b"})),
            None
        ),
        [
            "spec.controllerRef.apiGroup: Invalid value: \"Batch\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            "spec.controllerRef.kind: Required value",
            "spec.controllerRef.name: Invalid value: \"a/b\": may not contain '/'",
        ]
    );
    let job = json!({"apiGroup": "batch", "kind": "Job", "name": "j"});
    assert!(problems(spec(job.clone()), Some(spec(job.clone()))).is_empty());
    assert_eq!(
        problems(
            spec(json!({"apiGroup": "batch", "kind": "Job", "name": "k"})),
            Some(spec(job))
        ),
        ["spec.controllerRef: Invalid value: null: field is immutable"]
    );
}

#[test]
fn updates_ratchet_and_keep_immutable_fields() {
    let spec = |min: i64, class: &str| {
        pod_groups(
            json!([{"name": "g", "schedulingPolicy": {"gang": {"minCount": min}}, "priorityClassName": class}]),
        )
    };
    assert!(problems(spec(3, "high"), Some(spec(2, "high"))).is_empty());
    assert_eq!(
        problems(spec(0, "high"), Some(spec(2, "high"))),
        ["spec.podGroupTemplates[0].schedulingPolicy.gang.minCount: Required value"]
    );
    assert_eq!(
        problems(spec(2, "low"), Some(spec(2, "high"))),
        ["spec.podGroupTemplates[0].priorityClassName: Invalid value: null: field is immutable"]
    );
    // A value stored before these rules and left alone is not looked at again; the tree rules are.
    let bad_name = pod_groups(json!([{"name": "Bad", "schedulingPolicy": {"basic": {}}}]));
    assert!(problems(bad_name.clone(), Some(bad_name)).is_empty());
    let deep = |min: i64| {
        let mut spec = json!({"compositePodGroupTemplates": [{"name": "c1", "schedulingPolicy": {"basic": {}},
            "compositePodGroupTemplates": [{"name": "c2", "schedulingPolicy": {"basic": {}},
                "compositePodGroupTemplates": [{"name": "c3", "schedulingPolicy": {"basic": {}},
                    "compositePodGroupTemplates": [{"name": "c4", "schedulingPolicy": {"gang": {"minGroupCount": 1}},
                        "podGroupTemplates": [{"name": "g", "schedulingPolicy": {"basic": {}}}]}]}]}]}]});
        spec["compositePodGroupTemplates"][0]["compositePodGroupTemplates"][0]["compositePodGroupTemplates"]
            [0]["compositePodGroupTemplates"][0]["schedulingPolicy"]["gang"]["minGroupCount"] = json!(min);
        spec
    };
    let found = problems(deep(2), Some(deep(1)));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("spec.compositePodGroupTemplates[0]: Invalid value: [{\"Name\":\"c2\""),
        "{found:?}"
    );
    assert!(
        found[0].ends_with(": maximum template hierarchy depth is 4"),
        "{found:?}"
    );
}

#[test]
fn priorities_agree_across_the_tree() {
    let spec = pod_groups(json!([
        {"name": "a", "schedulingPolicy": {"basic": {}}, "priority": 5},
        {"name": "b", "schedulingPolicy": {"basic": {}}},
    ]));
    assert_eq!(
        problems(spec, None),
        ["spec: Invalid value: null: detected multiple priority configurations"]
    );
    let agreeing = json!({"compositePodGroupTemplates": [{
        "name": "c", "schedulingPolicy": {"basic": {}}, "priorityClassName": "high", "priority": 5,
        "podGroupTemplates": [{"name": "g", "schedulingPolicy": {"basic": {}}, "priorityClassName": "high", "priority": 5}],
    }]});
    assert!(problems(agreeing, None).is_empty());
}
