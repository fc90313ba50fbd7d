//! Workload admission over HTTP: the template trees kube-apiserver 1.37.2 refuses, with its
//! status code and causes. The cases transcribe upstream's `TestValidateWorkload` (its
//! `pkg/apis/scheduling/validation` table) for the template rules, plus the declarative rules a
//! real API server applies on top of them (one of the two lists, list sizes, names, what an update
//! may not change).
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a failure is a panic.

mod common;

use std::net::SocketAddr;

use common::http;
use serde_json::{Value, json};

const WORKLOADS: &str = "/apis/scheduling.k8s.io/v1beta1/namespaces/default/workloads";
const JSON: &str = "application/json";

fn workload(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "Workload",
           "metadata": {"name": name}, "spec": spec})
}

fn basic(name: &str) -> Value {
    json!({"name": name, "schedulingPolicy": {"basic": {}}})
}

fn composite(name: &str, pod_groups: Value, composites: Value) -> Value {
    let mut c = json!({"name": name, "schedulingPolicy": {"basic": {}}});
    if pod_groups.as_array().is_some_and(|a| !a.is_empty()) {
        c["podGroupTemplates"] = pod_groups;
    }
    if composites.as_array().is_some_and(|a| !a.is_empty()) {
        c["compositePodGroupTemplates"] = composites;
    }
    c
}

/// Upstream's `mkWorkload`, split in two: a real API server accepts only one of the two lists.
fn pod_group_spec() -> Value {
    json!({
        "controllerRef": {"apiGroup": "group", "kind": "foo", "name": "baz"},
        "podGroupTemplates": [
            {"name": "group1", "schedulingPolicy": {"basic": {}},
             "schedulingConstraints": {"topology": [{"key": "foo"}]}},
            {"name": "group2", "schedulingPolicy": {"gang": {"minCount": 2}},
             "schedulingConstraints": {"topology": [{"key": "foo"}]}},
        ],
    })
}

fn composite_spec() -> Value {
    json!({
        "controllerRef": {"apiGroup": "group", "kind": "foo", "name": "baz"},
        "compositePodGroupTemplates": [
            {"name": "compositegroup1", "schedulingPolicy": {"basic": {}},
             "schedulingConstraints": {"topology": [{"key": "foo"}]},
             "podGroupTemplates": [{"name": "childgroup1", "schedulingPolicy": {"basic": {}},
                                    "schedulingConstraints": {"topology": [{"key": "foo"}]}}]},
            {"name": "compositegroup2", "schedulingPolicy": {"gang": {"minGroupCount": 2}},
             "schedulingConstraints": {"topology": [{"key": "foo"}]},
             "podGroupTemplates": [{"name": "childgroup2", "schedulingPolicy": {"basic": {}},
                                    "schedulingConstraints": {"topology": [{"key": "foo"}]}}]},
        ],
    })
}

/// A chain of `levels` nested composites named `cpg1`…, the last holding the pod group `leaf`.
fn chain(levels: usize) -> Value {
    let mut node = composite(&format!("cpg{levels}"), json!([basic("leaf")]), json!([]));
    for level in (1..levels).rev() {
        node = composite(&format!("cpg{level}"), json!([]), json!([node]));
    }
    json!({"compositePodGroupTemplates": [node]})
}

fn causes(status: &Value) -> Vec<(String, String)> {
    status["details"]["causes"]
        .as_array()
        .map(|causes| {
            causes
                .iter()
                .map(|c| {
                    (
                        c["field"].as_str().unwrap_or_default().to_string(),
                        c["message"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn send(addr: SocketAddr, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let (code, _, status) = http(addr, method, path, JSON, &body.to_string()).await;
    (code, status)
}

const LABEL_PATTERN: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and \
     must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation \
     is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

#[tokio::test]
async fn workload_template_trees_are_checked_on_create() {
    let (server, _client) = common::start().await;
    let addr = server.addr;

    let mut no_controller = composite_spec();
    no_controller.as_object_mut().unwrap().remove("controllerRef");
    let mut no_pod_group_constraints = pod_group_spec();
    no_pod_group_constraints["podGroupTemplates"][1]
        .as_object_mut()
        .unwrap()
        .remove("schedulingConstraints");
    let mut no_composite_constraints = composite_spec();
    no_composite_constraints["compositePodGroupTemplates"][1]
        .as_object_mut()
        .unwrap()
        .remove("schedulingConstraints");
    let accepted = [
        ("basic and gang policies", composite_spec()),
        ("basic and gang pod groups", pod_group_spec()),
        ("no controllerRef", no_controller),
        ("no pod group scheduling constraints", no_pod_group_constraints),
        (
            "no composite pod group scheduling constraints",
            no_composite_constraints,
        ),
        (
            "three composite levels and their pod groups: the deepest tree",
            chain(3),
        ),
    ];
    for (i, (case, spec)) in accepted.into_iter().enumerate() {
        let (code, status) = send(addr, "POST", WORKLOADS, &workload(&format!("ok-{i}"), spec)).await;
        assert_eq!(code, 201, "{case}: {status}");
    }

    let mut childless = composite_spec();
    childless["compositePodGroupTemplates"][0]
        .as_object_mut()
        .unwrap()
        .remove("podGroupTemplates");
    let mut nested_childless = composite_spec();
    nested_childless["compositePodGroupTemplates"][0]
        .as_object_mut()
        .unwrap()
        .remove("podGroupTemplates");
    nested_childless["compositePodGroupTemplates"][0]["compositePodGroupTemplates"] =
        json!([{"name": "sub", "schedulingPolicy": {"gang": {"minGroupCount": 1}}}]);
    let mut nine = pod_group_spec();
    nine["podGroupTemplates"] = json!((1..=9).map(|i| basic(&format!("g{i}"))).collect::<Vec<_>>());
    let mut nine_nested = composite_spec();
    nine_nested["compositePodGroupTemplates"][0]["podGroupTemplates"] =
        json!((1..=9).map(|i| basic(&format!("c{i}"))).collect::<Vec<_>>());
    let mut both = pod_group_spec();
    both["compositePodGroupTemplates"] = composite_spec()["compositePodGroupTemplates"].clone();
    let mut two_priorities = composite_spec();
    two_priorities["compositePodGroupTemplates"][1]["podGroupTemplates"][0]["priorityClassName"] =
        json!("high");

    let refused: Vec<(&str, Value, Vec<(&str, String)>)> = vec![
        (
            "composite pod group template has no children",
            childless,
            vec![(
                "spec.compositePodGroupTemplates[0]",
                "Invalid value: \"compositegroup1\": must have at least one child PodGroupTemplate or \
                 CompositePodGroupTemplate"
                    .into(),
            )],
        ),
        (
            "composite pod group template nested child has no children",
            nested_childless,
            vec![(
                "spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0]",
                "Invalid value: \"sub\": must have at least one child PodGroupTemplate or CompositePodGroupTemplate"
                    .into(),
            )],
        ),
        (
            "duplicate names deep in tree",
            json!({"compositePodGroupTemplates": [
                composite("main", json!([]), json!([composite("main", json!([basic("leaf")]), json!([]))]))
            ]}),
            vec![(
                "spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0].name",
                "Duplicate value: \"main\"".into(),
            )],
        ),
        (
            "duplicate names in tree",
            json!({"compositePodGroupTemplates": [
                composite("cpg1", json!([basic("group1")]),
                          json!([composite("cpg2", json!([basic("group1")]), json!([]))]))
            ]}),
            vec![(
                "spec.compositePodGroupTemplates[0].compositePodGroupTemplates[0].podGroupTemplates[0].name",
                "Duplicate value: \"group1\"".into(),
            )],
        ),
        (
            "a pod group template named as a top-level pod group template",
            json!({"compositePodGroupTemplates": [
                composite("cpg1", json!([basic("leaf")]), json!([])),
                composite("cpg2", json!([basic("leaf")]), json!([])),
            ]}),
            vec![(
                "spec.compositePodGroupTemplates[1].podGroupTemplates[0].name",
                "Duplicate value: \"leaf\"".into(),
            )],
        ),
        (
            "exceeds max tree height",
            chain(4),
            vec![(
                "spec.compositePodGroupTemplates[0]",
                concat!(
                    r#"Invalid value: [{"Name":"cpg2","SchedulingPolicy":{"Basic":{},"Gang":null},"#,
                    r#""SchedulingConstraints":null,"DisruptionMode":null,"PriorityClassName":"","Priority":null,"#,
                    r#""PreemptionPolicy":null,"PodGroupTemplates":null,"CompositePodGroupTemplates":[{"Name":"cpg3","#,
                    r#""SchedulingPolicy":{"Basic":{},"Gang":null},"SchedulingConstraints":null,"DisruptionMode":null,"#,
                    r#""PriorityClassName":"","Priority":null,"PreemptionPolicy":null,"PodGroupTemplates":null,"#,
                    r#""CompositePodGroupTemplates":[{"Name":"cpg4","SchedulingPolicy":{"Basic":{},"Gang":null},"#,
                    r#""SchedulingConstraints":null,"DisruptionMode":null,"PriorityClassName":"","Priority":null,"#,
                    r#""PreemptionPolicy":null,"PodGroupTemplates":[{"Name":"leaf","SchedulingPolicy":{"Basic":{},"#,
                    r#""Gang":null},"SchedulingConstraints":null,"ResourceClaims":null,"DisruptionMode":null,"#,
                    r#""PriorityClassName":"","Priority":null,"PreemptionPolicy":null}],"#,
                    r#""CompositePodGroupTemplates":null}]}]}]: maximum template hierarchy depth is 4"#
                )
                .into(),
            )],
        ),
        (
            "too many pod group templates",
            nine,
            vec![("spec.podGroupTemplates", "Too many: 9: must have at most 8 items".into())],
        ),
        (
            "too many pod group templates in a composite",
            nine_nested,
            vec![(
                "spec.compositePodGroupTemplates[0].podGroupTemplates",
                "Too many: 9: must have at most 8 items".into(),
            )],
        ),
        (
            "too many composite templates",
            json!({"compositePodGroupTemplates": (1..=9)
                .map(|i| composite(&format!("c{i}"), json!([basic(&format!("g{i}"))]), json!([])))
                .collect::<Vec<_>>()}),
            vec![("spec.compositePodGroupTemplates", "Too many: 9: must have at most 8 items".into())],
        ),
        (
            "bad template names",
            json!({"compositePodGroupTemplates": [
                composite("a.b", json!([basic("Group_1"), basic("")]), json!([])),
            ]}),
            vec![
                ("spec.compositePodGroupTemplates[0].name", "Invalid value: \"a.b\": must not contain dots".into()),
                (
                    "spec.compositePodGroupTemplates[0].podGroupTemplates[0].name",
                    format!("Invalid value: \"Group_1\": {LABEL_PATTERN}"),
                ),
                ("spec.compositePodGroupTemplates[0].podGroupTemplates[1].name", "Required value".into()),
            ],
        ),
        (
            "a name used twice in one list",
            json!({"podGroupTemplates": [basic("group1"), basic("group1")]}),
            vec![(
                "spec.podGroupTemplates[1]",
                r#"Duplicate value: {"name":"group1","schedulingPolicy":{"basic":{}},"schedulingConstraints":null}"#
                    .into(),
            )],
        ),
        (
            "both template lists",
            both,
            vec![(
                "spec",
                "Invalid value: \"{podGroupTemplates, compositePodGroupTemplates}\": must specify exactly one of: \
                 `podGroupTemplates`, `compositePodGroupTemplates`"
                    .into(),
            )],
        ),
        (
            "no template list",
            json!({}),
            vec![(
                "spec",
                "Invalid value: \"\": must specify one of: `podGroupTemplates`, `compositePodGroupTemplates`".into(),
            )],
        ),
        (
            "two priorities in one tree",
            two_priorities,
            vec![(
                "spec",
                "Invalid value: null: all priority and priorityClassName values must be identical, detected \
                 multiple values"
                    .into(),
            )],
        ),
        (
            "a template without a policy, a gang without a quorum",
            json!({"compositePodGroupTemplates": [{
                "name": "c", "schedulingPolicy": {"gang": {}},
                "podGroupTemplates": [{"name": "g"}],
            }]}),
            vec![
                ("spec.compositePodGroupTemplates[0].schedulingPolicy.gang.minGroupCount", "Required value".into()),
                (
                    "spec.compositePodGroupTemplates[0].podGroupTemplates[0].schedulingPolicy",
                    "Invalid value: \"\": must specify one of: `basic`, `gang`".into(),
                ),
            ],
        ),
    ];
    for (i, (case, spec, want)) in refused.into_iter().enumerate() {
        let (code, status) = send(addr, "POST", WORKLOADS, &workload(&format!("bad-{i}"), spec)).await;
        assert_eq!(code, 422, "{case}: {status}");
        assert_eq!(status["reason"], "Invalid", "{case}");
        let want: Vec<(String, String)> = want.into_iter().map(|(f, m)| (f.to_string(), m)).collect();
        assert_eq!(causes(&status), want, "{case}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn workload_updates_keep_their_templates() {
    let (server, _client) = common::start().await;
    let addr = server.addr;
    let (code, created) = send(addr, "POST", WORKLOADS, &workload("w", composite_spec())).await;
    assert_eq!(code, 201, "{created}");
    let path = format!("{WORKLOADS}/w");

    // A gang's quorum may change.
    let mut quorum = created.clone();
    quorum["spec"]["compositePodGroupTemplates"][1]["schedulingPolicy"]["gang"]["minGroupCount"] = json!(1);
    let (code, updated) = send(addr, "PUT", &path, &quorum).await;
    assert_eq!(code, 200, "{updated}");

    let mut added = updated.clone();
    added["spec"]["compositePodGroupTemplates"][0]["podGroupTemplates"]
        .as_array_mut()
        .unwrap()
        .push(basic("extra"));
    let mut removed = updated.clone();
    removed["spec"]["compositePodGroupTemplates"]
        .as_array_mut()
        .unwrap()
        .pop();
    let mut constrained = updated.clone();
    constrained["spec"]["compositePodGroupTemplates"][0]["schedulingConstraints"] =
        json!({"topology": [{"key": "bar"}]});
    let mut to_gang = updated.clone();
    to_gang["spec"]["compositePodGroupTemplates"][0]["schedulingPolicy"] =
        json!({"gang": {"minGroupCount": 1}});
    let mut deeper = updated.clone();
    deeper["spec"]["compositePodGroupTemplates"][0]["podGroupTemplates"][0]["name"] =
        json!("compositegroup2");
    let cases: Vec<(&str, Value, Vec<(&str, &str)>)> = vec![
        (
            "a template added",
            added,
            vec![(
                "spec.compositePodGroupTemplates[0].podGroupTemplates[1]",
                "Forbidden: item may not be added",
            )],
        ),
        (
            "a template removed",
            removed,
            vec![(
                "spec.compositePodGroupTemplates",
                "Forbidden: item may not be removed",
            )],
        ),
        (
            "changed constraints",
            constrained,
            vec![(
                "spec.compositePodGroupTemplates[0].schedulingConstraints",
                "Invalid value: null: field is immutable",
            )],
        ),
        (
            "a basic composite made a gang",
            to_gang,
            vec![
                (
                    "spec.compositePodGroupTemplates[0].schedulingPolicy.basic",
                    "Invalid value: null: field is immutable",
                ),
                (
                    "spec.compositePodGroupTemplates[0].schedulingPolicy.gang",
                    "Invalid value: null: field cannot be set once created",
                ),
            ],
        ),
        (
            // The tree rules hold on every update; the rename is also an add and a remove.
            "a pod group renamed as a composite",
            deeper,
            vec![
                (
                    "spec.compositePodGroupTemplates[0].podGroupTemplates[0].name",
                    "Duplicate value: \"compositegroup2\"",
                ),
                (
                    "spec.compositePodGroupTemplates[0].podGroupTemplates[0]",
                    "Forbidden: item may not be added",
                ),
                (
                    "spec.compositePodGroupTemplates[0].podGroupTemplates",
                    "Forbidden: item may not be removed",
                ),
            ],
        ),
    ];
    for (case, body, want) in cases {
        let (code, status) = send(addr, "PUT", &path, &body).await;
        assert_eq!(code, 422, "{case}: {status}");
        let want: Vec<(String, String)> = want
            .into_iter()
            .map(|(f, m)| (f.to_string(), m.to_string()))
            .collect();
        assert_eq!(causes(&status), want, "{case}");
    }
    server.shutdown().await;
}
