//! The in-process store API (what a scenario runner uses), without HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a failure is a panic.

use std::time::Duration;

use serde_json::json;
use unisched_sim::{
    ApiServer, DeleteOptions, Deletion, EventType, ListOptions, Patch, Propagation, Store, StoreConfig,
    StoreError, WatchOptions,
};

fn store() -> Store {
    ApiServer::builder().controllers(false).build().store().clone()
}

/// A store that keeps only the last `history` events for watches to resume from.
fn store_with_history(history: usize) -> Store {
    ApiServer::builder()
        .controllers(false)
        .history(history)
        .build()
        .store()
        .clone()
}

fn pod(name: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": "x"}]}})
}

#[test]
fn defaults_and_admission() {
    let s = store();
    let n = s
        .create(
            "nodes",
            None,
            json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4", "pods": "110"}}}),
        )
        .unwrap();
    assert_eq!(
        n["status"]["allocatable"]["cpu"], "4",
        "allocatable defaults to capacity"
    );
    s.create(
        "priorityclasses",
        None,
        json!({"metadata": {"name": "high"}, "value": 1000, "preemptionPolicy": "Never"}),
    )
    .unwrap();
    let mut p = pod("a");
    p["spec"]["priorityClassName"] = json!("high");
    p["spec"]["containers"][0]["resources"] = json!({"limits": {"cpu": "1", "memory": "1Gi"}});
    let p = s.create("pods", None, p).unwrap();
    assert_eq!(p["spec"]["priority"], 1000);
    assert_eq!(p["spec"]["preemptionPolicy"], "Never");
    assert_eq!(p["spec"]["containers"][0]["resources"]["requests"]["cpu"], "1");
    assert_eq!(p["status"]["qosClass"], "Guaranteed");
    let mut bad = pod("b");
    bad["spec"]["priorityClassName"] = json!("missing");
    assert_eq!(s.create("pods", None, bad).unwrap_err().code(), 403);
    s.create(
        "priorityclasses",
        None,
        json!({"metadata": {"name": "dflt"}, "value": 7, "globalDefault": true}),
    )
    .unwrap();
    let p = s.create("pods", None, pod("c")).unwrap();
    assert_eq!(
        (
            p["spec"]["priority"].as_i64(),
            p["spec"]["priorityClassName"].as_str()
        ),
        (Some(7), Some("dflt"))
    );
    let err = s
        .patch(
            "priorityclasses",
            None,
            "high",
            &Patch::Merge(json!({"value": 5})),
        )
        .unwrap_err();
    assert_eq!(err.code(), 422);
}

#[test]
fn apply_creates_then_merges_and_writes_status() {
    let s = store();
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "pdb", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}});
    let o = s.apply(pdb.clone()).unwrap();
    assert_eq!(
        o["status"]["desiredHealthy"], 1,
        "status given to apply is written through /status"
    );
    let mut changed = pdb;
    changed["spec"]["minAvailable"] = json!(2);
    let o = s.apply(changed).unwrap();
    assert_eq!(o["spec"]["minAvailable"], 2);
    assert_eq!(o["metadata"]["generation"], 2);
    assert!(
        s.apply(json!({"apiVersion": "v9", "kind": "Nope", "metadata": {"name": "x"}}))
            .is_err()
    );
}

/// A write of the status subresource changes `status` and, for a pod, labels, annotations and
/// finalizers: never the spec, the owner references or anything outside metadata, whatever else
/// its body changes, removes or adds. One that changes nothing it may change is no write.
#[test]
fn a_pod_status_write_changes_status_and_metadata_only() {
    let s = store();
    let mut p = pod("a");
    p["metadata"]["labels"] = json!({"app": "web"});
    p["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u-1"}]);
    let created = s.create("pods", None, p).unwrap();
    let stored = |s: &Store| s.get("pods", Some("default"), "a").unwrap().to_value();
    let before = stored(&s);

    // A patch that also edits the spec and the owner references, relabels, and adds a field.
    s.patch_status(
        "pods",
        Some("default"),
        "a",
        &Patch::Merge(json!({
            "spec": {"nodeName": "n9", "containers": null},
            "metadata": {"labels": {"app": "db"}, "ownerReferences": null},
            "extra": {"x": 1},
            "status": {"phase": "Running"},
        })),
    )
    .unwrap();
    let after = stored(&s);
    assert_eq!(after["status"]["phase"], "Running");
    for field in ["spec", "apiVersion", "kind"] {
        assert_eq!(after[field], before[field], "{field} kept");
    }
    assert_eq!(
        after["metadata"]["labels"],
        json!({"app": "db"}),
        "pods/status may relabel, as upstream's pod status strategy allows"
    );
    assert_eq!(
        after["metadata"]["ownerReferences"], before["metadata"]["ownerReferences"],
        "but not touch owner references"
    );
    assert!(after.get("extra").is_none(), "no new top-level field: {after}");

    // A full body without a spec, and with a null status: the spec stays, the status goes.
    let mut body = after.clone();
    body.as_object_mut().unwrap().remove("spec");
    body["status"] = serde_json::Value::Null;
    let updated = s.update_status("pods", Some("default"), body).unwrap();
    assert_eq!(updated["spec"], before["spec"]);
    assert!(
        updated.get("status").is_none(),
        "a null status is removed: {}",
        updated.value()
    );

    // Nothing it may change changes: no write, the resourceVersion stays.
    let rv = updated.resource_version();
    let again = s
        .patch_status(
            "pods",
            Some("default"),
            "a",
            &Patch::Merge(json!({"spec": {"nodeName": "n1"}})),
        )
        .unwrap();
    assert_eq!(again.resource_version(), rv);
    assert!(rv > created.resource_version());
}

/// The status writes of a ResourceClaim keep its whole metadata, as upstream's claim status
/// strategy does; a Deployment's keep only its labels.
#[test]
fn claim_and_deployment_status_writes_keep_the_metadata_their_kinds_protect() {
    let s = store();
    s.create(
        "resourceclaims",
        None,
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": "c", "namespace": "default", "labels": {"a": "1"}},
               "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}}),
    )
    .unwrap();
    let claim = s
        .patch_status(
            "resourceclaims",
            Some("default"),
            "c",
            &Patch::Merge(json!({
                "metadata": {"labels": {"a": "2"}, "annotations": {"x": "y"},
                             "finalizers": ["example.com/f"]},
                "status": {
                    "allocation": {"devices": {"results": [{"request": "r",
                        "driver": "gpu.example.com", "pool": "n1", "device": "d0"}]}},
                    "reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}],
                },
            })),
        )
        .unwrap();
    assert_eq!(claim["status"]["reservedFor"][0]["name"], "p");
    assert_eq!(claim["metadata"]["labels"], json!({"a": "1"}));
    assert!(
        claim["metadata"].get("annotations").is_none(),
        "{}",
        claim.value()
    );
    assert!(claim["metadata"].get("finalizers").is_none(), "{}", claim.value());

    s.create(
        "deployments",
        None,
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "d", "namespace": "default", "labels": {"a": "1"}},
               "spec": {"selector": {"matchLabels": {"app": "d"}},
                        "template": {"metadata": {"labels": {"app": "d"}},
                                     "spec": {"containers": [{"name": "c", "image": "x"}]}}}}),
    )
    .unwrap();
    let deployment = s
        .patch_status(
            "deployments",
            Some("default"),
            "d",
            &Patch::Merge(json!({
                "metadata": {"labels": {"a": "2"}, "annotations": {"x": "y"}},
                "status": {"replicas": 1},
            })),
        )
        .unwrap();
    assert_eq!(deployment["status"]["replicas"], 1);
    assert_eq!(deployment["metadata"]["labels"], json!({"a": "1"}));
    assert_eq!(deployment["metadata"]["annotations"]["x"], "y");
}

/// A merge patch of `status` on claim `default/name`'s status.
fn write_claim_status(
    s: &Store,
    name: &str,
    status: serde_json::Value,
) -> Result<serde_json::Value, StoreError> {
    s.patch_status(
        "resourceclaims",
        Some("default"),
        name,
        &Patch::Merge(json!({ "status": status })),
    )
    .map(|o| o.value().clone())
}

/// The causes of a 422 answer, as `(field, message)`; panics on any other answer.
fn refusal<T: std::fmt::Debug>(answer: Result<T, StoreError>) -> Vec<(String, String)> {
    match answer {
        Err(StoreError::Invalid { causes, .. }) => causes.into_iter().map(|c| (c.field, c.message)).collect(),
        other => panic!("expected 422, got {other:?}"),
    }
}

/// The claim status invariants of upstream's validation, which keep a device from being handed
/// out twice: reserved only while allocated, an allocation removed but never replaced, no new
/// consumers while the claim is being deleted, consumers unique by UID.
#[test]
fn claim_status_writes_keep_upstreams_invariants() {
    let s = store();
    s.create(
        "resourceclaims",
        None,
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": "c", "namespace": "default",
                            "finalizers": ["resource.kubernetes.io/delete-protection"]},
               "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}}),
    )
    .unwrap();
    let write = |status: serde_json::Value| write_claim_status(&s, "c", status);
    let refused_at = |status: serde_json::Value| refusal(write(status));
    let allocation = |device: &str| {
        json!({"devices": {"results": [{"request": "r", "driver": "gpu.example.com",
                                          "pool": "n1", "device": device}]}})
    };
    let consumer = |uid: &str| json!({"resource": "pods", "name": format!("p-{uid}"), "uid": uid});

    let causes = refused_at(json!({"reservedFor": [consumer("1")]}));
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].0, "status.reservedFor");
    assert!(
        causes[0]
            .1
            .starts_with("Forbidden: may not be specified when `allocated`")
    );

    write(json!({"allocation": allocation("d0"), "reservedFor": [consumer("1")]})).unwrap();
    let causes = refused_at(json!({"allocation": allocation("d1")}));
    assert_eq!(
        causes,
        [(
            "status.allocation".into(),
            "Invalid value: null: field cannot be modified once set".into()
        )]
    );
    // The same allocation again is no change.
    write(json!({"allocation": allocation("d0")})).unwrap();

    let causes = refused_at(json!({"reservedFor": [consumer("1"), consumer("1"), {"resource": "pods"}]}));
    // kube-apiserver 1.37.2 answers the same three, in this order.
    let fields: Vec<&str> = causes.iter().map(|(f, _)| f.as_str()).collect();
    assert_eq!(
        fields,
        [
            "status.reservedFor[2].name",
            "status.reservedFor[2].uid",
            "status.reservedFor[1]"
        ],
        "{causes:?}"
    );
    // The whole entry, in the API's field order, as kube-apiserver 1.37.2 shows it.
    assert_eq!(
        causes[2].1,
        r#"Duplicate value: {"resource":"pods","name":"p-1","uid":"1"}"#
    );

    // Being deleted (the finalizer holds it): consumers may leave, none may join.
    write(json!({"reservedFor": [consumer("1"), consumer("2")]})).unwrap();
    s.delete("resourceclaims", Some("default"), "c", &DeleteOptions::default())
        .unwrap();
    let causes = refused_at(json!({"reservedFor": [consumer("1"), consumer("2"), consumer("3")]}));
    assert!(
        causes[0].1.starts_with("Forbidden: new entries may not be added"),
        "{causes:?}"
    );
    write(json!({"reservedFor": [consumer("2")]})).unwrap();

    // Deallocation: the allocation and its consumers go together.
    let claim = write(json!({"allocation": null, "reservedFor": null})).unwrap();
    assert!(claim.get("status").and_then(|st| st.get("allocation")).is_none());
}

const LABEL_PATTERN: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
    characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or \
    '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const SUBDOMAIN_PATTERN: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
    alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
    (e.g. 'example.com', regex used for validation is \
    '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const NOT_A_REQUEST: &str = "must be the name of a request in the claim or the name of a request \
    and a subrequest separated by '/'";

/// A new allocation result and the device statuses are checked as kube-apiserver 1.37.2 checks
/// them. Both writes below were sent to kube-apiserver 1.37.2 with kubectl (`e2e/upstream/
/// control-plane start`, `kubectl patch --subresource=status --type=merge`); the expected
/// causes are its answers, in its order: the hand-written checks first, then the declarative
/// ones with their own wording.
#[test]
fn claim_allocation_results_and_device_statuses_are_checked_as_kube_apiserver_does() {
    let s = store();
    s.create(
        "resourceclaims",
        None,
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": "c", "namespace": "default"},
               "spec": {"devices": {"requests": [
                   {"name": "r", "exactly": {"deviceClassName": "gpu"}},
                   {"name": "f", "firstAvailable": [{"name": "a", "deviceClassName": "gpu"},
                                                    {"name": "b", "deviceClassName": "gpu"}]}]}}}),
    )
    .unwrap();
    let write = |status: serde_json::Value| write_claim_status(&s, "c", status);
    let refused_at = |status: serde_json::Value| refusal(write(status));
    let long_driver = format!("{}.com", "a".repeat(70));
    let causes = refused_at(json!({"allocation": {"devices": {
        "results": [
            {"request": "x", "driver": "GPU.example.com", "pool": "n1/Bad_Part", "device": "", "shareID": "ABC"},
            {"request": "f/a", "driver": "gpu.example.com", "pool": "n1", "device": "d1"},
            {"request": "f/zz", "driver": "gpu.example.com", "pool": "n1", "device": "d2"},
            {"request": "a/b/c", "driver": "", "pool": "", "device": "Dev"},
            {"request": "f", "driver": long_driver, "pool": "n1", "device": "d3"},
        ],
        "config": [
            {"source": "", "requests": ["r", "r", "q"]},
            {"source": "Other", "opaque": {"driver": "gpu.example.com", "parameters": [1]}},
        ],
    }}}));
    let results = "status.allocation.devices.results";
    let config = "status.allocation.devices.config";
    let want: Vec<(String, String)> = [
        (
            format!("{results}[0].request"),
            format!("Invalid value: \"x\": {NOT_A_REQUEST}"),
        ),
        (
            format!("{results}[0].device"),
            format!("Invalid value: \"\": {LABEL_PATTERN}"),
        ),
        (
            format!("{results}[2].request"),
            format!("Invalid value: \"f/zz\": {NOT_A_REQUEST}"),
        ),
        (
            format!("{results}[3].request"),
            format!("Invalid value: \"a/b/c\": {NOT_A_REQUEST}"),
        ),
        (
            format!("{results}[3].device"),
            format!("Invalid value: \"Dev\": {LABEL_PATTERN}"),
        ),
        (
            format!("{config}[0].requests[2]"),
            format!("Invalid value: \"q\": {NOT_A_REQUEST}"),
        ),
        (format!("{config}[0].opaque"), "Required value".into()),
        (
            format!("{config}[1].opaque.parameters"),
            "Invalid value: \"<value omitted>\": must be a valid JSON object".into(),
        ),
        (
            format!("{results}[0].pool"),
            format!("Invalid value: \"Bad_Part\": segment 1: {SUBDOMAIN_PATTERN}"),
        ),
        (
            format!("{results}[0].shareID"),
            "Invalid value: \"ABC\": must be a lowercase UUID in 8-4-4-4-12 format".into(),
        ),
        (format!("{results}[3].driver"), "Required value".into()),
        (format!("{results}[3].pool"), "Required value".into()),
        (
            format!("{results}[4].driver"),
            "Too long: may not be more than 63 characters".into(),
        ),
        (format!("{config}[0].source"), "Required value".into()),
        (
            format!("{config}[0].requests[1]"),
            "Duplicate value: \"r\"".into(),
        ),
        (
            format!("{config}[1].source"),
            "Unsupported value: \"Other\": supported values: \"FromClaim\", \"FromClass\"".into(),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(causes, want);

    let share = "0b7c3f9e-3f6a-4c1e-9d2b-1a2b3c4d5e6f";
    write(json!({"allocation": {"devices": {"results": [
        {"request": "r", "driver": "gpu.example.com", "pool": "n1", "device": "d0"},
        {"request": "f/a", "driver": "gpu.example.com", "pool": "n1", "device": "d1", "shareID": share},
    ]}}}))
    .unwrap();
    let consumer = json!({"resource": "pods", "name": "p", "uid": "1"});
    let causes = refused_at(json!({
        "reservedFor": [consumer, consumer, {"resource": "pods"}],
        "devices": [
            {"driver": "gpu.example.com", "pool": "n1", "device": "d9"},
            {"driver": "gpu.example.com", "pool": "n1", "device": "d0",
             "conditions": [{"type": "A", "status": "True", "reason": "R",
                             "lastTransitionTime": "2026-01-01T00:00:00Z", "message": ""}]},
            {"driver": "gpu.example.com", "pool": "n1", "device": "d0"},
            {"driver": "", "pool": "N1/x", "device": "d1", "shareID": share, "data": [1]},
        ],
    }));
    let want: Vec<(String, String)> = [
        ("status.reservedFor[2].name".to_string(), "Required value".to_string()),
        ("status.reservedFor[2].uid".into(), "Required value".into()),
        (
            "status.devices[0]".into(),
            r#"Invalid value: {"Driver":"gpu.example.com","Pool":"n1","Device":"d9","ShareID":""}: must be an allocated device in the claim"#.into(),
        ),
        ("status.devices[3].driver".into(), "Required value".into()),
        ("status.devices[3].pool".into(), format!("Invalid value: \"N1\": {SUBDOMAIN_PATTERN}")),
        (
            "status.devices[3]".into(),
            format!(r#"Invalid value: {{"Driver":"","Pool":"N1/x","Device":"d1","ShareID":"{share}"}}: must be an allocated device in the claim"#),
        ),
        (
            "status.devices[3].data".into(),
            "Invalid value: \"<value omitted>\": must be a valid JSON object".into(),
        ),
        (
            "status.reservedFor[1]".into(),
            r#"Duplicate value: {"resource":"pods","name":"p","uid":"1"}"#.into(),
        ),
        (
            "status.devices[2]".into(),
            r#"Duplicate value: {"driver":"gpu.example.com","pool":"n1","device":"d0","conditions":null}"#.into(),
        ),
    ]
    .into_iter()
    .collect();
    assert_eq!(causes, want);

    // Too many results: the size is the only answer, the entries are not looked at.
    s.create(
        "resourceclaims",
        None,
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
               "metadata": {"name": "c2", "namespace": "default"},
               "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}}),
    )
    .unwrap();
    let results: Vec<_> = (0..33)
        .map(|i| json!({"request": "x", "driver": "", "pool": "n1", "device": format!("d{i}")}))
        .collect();
    assert_eq!(
        refusal(write_claim_status(
            &s,
            "c2",
            json!({"allocation": {"devices": {"results": results}}})
        )),
        [(
            "status.allocation.devices.results".to_string(),
            "Too many: 33: must have at most 32 items".to_string()
        )]
    );

    // Statuses of allocated devices, the shared one by its share ID, are accepted.
    let claim = write(json!({"devices": [
        {"driver": "gpu.example.com", "pool": "n1", "device": "d0", "data": {"k": "v"}},
        {"driver": "gpu.example.com", "pool": "n1", "device": "d1", "shareID": share},
    ]}))
    .unwrap();
    assert_eq!(claim["status"]["devices"][1]["shareID"], share);
}

#[test]
fn subscription_sees_every_change_and_selector_transitions() {
    let s = store();
    let mut all = s.subscribe();
    let opts = WatchOptions {
        field_selector: unisched_sim::FieldSelector::parse("spec.nodeName=").unwrap(),
        resource_version: Some(s.resource_version().to_string()),
        ..WatchOptions::default()
    };
    let mut pending = s.watch("pods", Some("default"), &opts).unwrap();
    s.create("pods", None, pod("a")).unwrap();
    s.bind("default", "a", "n1", None).unwrap();
    s.delete("pods", None, "a", &DeleteOptions::default()).unwrap();
    let kinds: Vec<EventType> = (0..3)
        .map(|_| all.try_next().unwrap().unwrap().event_type)
        .collect();
    assert_eq!(kinds, [EventType::Added, EventType::Modified, EventType::Deleted]);
    assert!(all.try_next().unwrap().is_none());
    let a = pending.try_next().unwrap().unwrap();
    assert_eq!(a.event_type, EventType::Added);
    let d = pending.try_next().unwrap().unwrap();
    assert_eq!(
        d.event_type,
        EventType::Deleted,
        "binding moves the pod out of spec.nodeName="
    );
    assert_eq!(
        d.object["spec"].get("nodeName"),
        None,
        "the DELETED object is the last matching state"
    );
    assert!(
        pending.try_next().unwrap().is_none(),
        "the real deletion is not seen again"
    );
}

#[test]
fn subscription_falls_behind_history_with_410() {
    let s = store_with_history(10);
    let mut sub = s.subscribe();
    for i in 0..20 {
        s.create("pods", None, pod(&format!("p{i}"))).unwrap();
    }
    assert_eq!(sub.try_next().unwrap_err().code(), 410);
    assert!(s.oldest_resource_version() > sub.position());
}

#[test]
fn exact_resource_version_lists_roll_back() {
    let s = store();
    s.create("pods", None, pod("a")).unwrap();
    let rv = s.resource_version();
    s.create("pods", None, pod("b")).unwrap();
    s.patch(
        "pods",
        None,
        "a",
        &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .unwrap();
    s.delete("pods", None, "a", &DeleteOptions::default()).unwrap();
    let opts = ListOptions {
        resource_version: Some(rv.to_string()),
        resource_version_match: Some("Exact".into()),
        ..ListOptions::default()
    };
    let old = s.list("pods", Some("default"), &opts).unwrap();
    assert_eq!(old.resource_version, rv);
    assert_eq!(old.items.len(), 1);
    assert_eq!(old.items[0].name(), "a");
    assert!(old.items[0]["metadata"].get("labels").is_none());
    assert!(
        s.list("pods", Some("default"), &ListOptions::default())
            .unwrap()
            .items
            .iter()
            .all(|p| p.name() == "b")
    );
}

#[test]
fn delete_preconditions_and_dry_run() {
    let s = store();
    let p = s.create("pods", None, pod("a")).unwrap();
    let opts = DeleteOptions {
        precondition_uid: Some("other".into()),
        ..DeleteOptions::default()
    };
    assert_eq!(s.delete("pods", None, "a", &opts).unwrap_err().code(), 409);
    let opts = DeleteOptions {
        dry_run: true,
        ..DeleteOptions::default()
    };
    assert!(matches!(
        s.delete("pods", None, "a", &opts).unwrap(),
        Deletion::Removed(_)
    ));
    assert!(s.try_get("pods", None, "a").is_some());
    let opts = DeleteOptions {
        precondition_uid: Some(p.uid().to_string()),
        ..DeleteOptions::default()
    };
    assert!(matches!(
        s.delete("pods", None, "a", &opts).unwrap(),
        Deletion::Removed(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_and_namespace_deletion_with_the_collector() {
    let running = ApiServer::builder()
        .kubelet(None)
        .build()
        .serve("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let s = running.store().clone();
    s.create("namespaces", None, json!({"metadata": {"name": "team"}}))
        .unwrap();
    let owner = s
        .create("configmaps", Some("team"), json!({"metadata": {"name": "owner"}}))
        .unwrap();
    let mut dep = pod("dep");
    dep["metadata"]["namespace"] = json!("team");
    dep["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.uid(), "blockOwnerDeletion": true}]);
    s.create("pods", Some("team"), dep).unwrap();
    let opts = DeleteOptions {
        propagation: Propagation::Foreground,
        ..DeleteOptions::default()
    };
    let d = s.delete("configmaps", Some("team"), "owner", &opts).unwrap();
    assert!(
        matches!(d, Deletion::Pending(_)),
        "the owner waits for its dependents"
    );
    let gone = |res: &str, name: &str| {
        let s = s.clone();
        let (res, name) = (res.to_string(), name.to_string());
        async move {
            for _ in 0..250 {
                if s.try_get(&res, Some("team"), &name).is_none() {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            false
        }
    };
    assert!(gone("pods", "dep").await);
    assert!(gone("configmaps", "owner").await);

    s.create(
        "pods",
        Some("team"),
        json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    )
    .unwrap();
    s.delete("namespaces", None, "team", &DeleteOptions::default())
        .unwrap();
    assert!(gone("pods", "x").await, "namespace contents are deleted");
    running.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_helpers() {
    let s = store();
    let s2 = s.clone();
    let waiter = tokio::spawn(async move {
        s2.wait_for("pods", Some("default"), "late", Duration::from_secs(5), |p| {
            p["spec"]["nodeName"] == "n1"
        })
        .await
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.create("pods", None, pod("late")).unwrap();
    s.bind("default", "late", "n1", None).unwrap();
    assert!(waiter.await.unwrap().is_ok());
    assert!(
        s.wait_quiet(Duration::from_millis(50), Duration::from_secs(2))
            .await
    );
    let err = s
        .wait_for("pods", None, "never", Duration::from_millis(50), |_| true)
        .await
        .unwrap_err();
    assert_eq!(err.code(), 504);
    let _ = StoreConfig::default();
}

/// A watch of one resource is woken by writes of that resource only (a scheduler holds a dozen
/// watches, and each write used to wake them all); a subscription to everything by every write.
#[test]
fn a_watch_is_woken_by_writes_of_its_own_resource_only() {
    use futures::FutureExt;
    let s = store();
    let mut pods = s.watch("pods", None, &WatchOptions::default()).unwrap();
    let mut events = s.subscribe_kind(s.resolve("events.events.k8s.io").unwrap());
    let mut all = s.subscribe();
    s.create(
        "nodes",
        None,
        json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4", "pods": "110"}}}),
    )
    .unwrap();
    assert!(
        pods.changed().now_or_never().is_none(),
        "a node write woke the pod watch"
    );
    assert!(
        events.changed().now_or_never().is_none(),
        "a node write woke the event subscription"
    );
    assert!(matches!(all.changed().now_or_never(), Some(Ok(()))));
    s.create("pods", Some("default"), pod("w")).unwrap();
    assert!(matches!(pods.changed().now_or_never(), Some(Ok(()))));
    assert!(matches!(all.changed().now_or_never(), Some(Ok(()))));
    assert!(events.changed().now_or_never().is_none());
    assert_eq!(pods.try_next().unwrap().unwrap().object.name(), "w");
    assert!(
        events.try_next().unwrap().is_none(),
        "a one-kind subscription reads its kind only"
    );
    assert_eq!(all.try_next().unwrap().unwrap().object.name(), "n1");
}

/// A watch of one kind sleeps through other kinds' writes, so it may fall behind the retained
/// history without having lost anything: it expires (410) only when events of its own kind were
/// dropped, as a watch of kube-apiserver's per-resource cache does, and a bookmark's position
/// catches up with the store.
#[test]
fn a_quiet_watch_outlives_other_kinds_history_but_not_its_own() {
    let s = store_with_history(10);
    let before = s.resource_version();
    let mut nodes = s.watch("nodes", None, &WatchOptions::default()).unwrap();
    let mut pods = s.watch("pods", None, &WatchOptions::default()).unwrap();
    for i in 0..20 {
        s.create("pods", None, pod(&format!("p{i}"))).unwrap();
    }
    assert!(s.oldest_resource_version() > nodes.position() + 1);
    nodes.catch_up();
    assert_eq!(
        nodes.position(),
        s.resource_version(),
        "a bookmark would carry the current version"
    );
    s.create(
        "nodes",
        None,
        json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4", "pods": "110"}}}),
    )
    .unwrap();
    assert_eq!(nodes.try_next().unwrap().unwrap().object.name(), "n1");
    assert_eq!(
        pods.try_next().unwrap_err().code(),
        410,
        "pod events were dropped"
    );
    // Resuming from a version older than the history: fine for nodes, expired for pods.
    let from_before = WatchOptions {
        resource_version: Some(before.to_string()),
        ..WatchOptions::default()
    };
    let mut resumed = s.watch("nodes", None, &from_before).unwrap();
    assert_eq!(resumed.try_next().unwrap().unwrap().object.name(), "n1");
    assert!(resumed.try_next().unwrap().is_none());
    let mut resumed = s.watch("pods", None, &from_before).unwrap();
    assert_eq!(resumed.try_next().unwrap_err().code(), 410);
}

/// A poll reads on past any number of events that do not match (here more than one poll's scan
/// window): a watch of one kind or with a selector must not stop short of its next event and
/// then wait for a wake-up that only its own kind's writes send.
#[test]
fn a_watch_reads_past_any_run_of_events_it_does_not_match() {
    let s = store();
    let mut nodes = s.watch("nodes", None, &WatchOptions::default()).unwrap();
    let labelled = WatchOptions {
        label_selector: unisched_sim::LabelSelector::parse("app=x").unwrap(),
        ..WatchOptions::default()
    };
    let mut selected = s.watch("pods", None, &labelled).unwrap();
    for i in 0..3_000 {
        s.create("pods", None, pod(&format!("p{i}"))).unwrap();
    }
    s.create(
        "nodes",
        None,
        json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4", "pods": "110"}}}),
    )
    .unwrap();
    let mut x = pod("x");
    x["metadata"]["labels"] = json!({"app": "x"});
    s.create("pods", None, x).unwrap();
    assert_eq!(nodes.try_next().unwrap().unwrap().object.name(), "n1");
    assert_eq!(selected.try_next().unwrap().unwrap().object.name(), "x");
}

#[test]
fn binding_marks_the_pod_scheduled_in_the_same_write() {
    let s = store();
    s.create(
        "nodes",
        None,
        json!({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "4", "pods": "110"}}}),
    )
    .unwrap();
    s.create("pods", Some("default"), pod("p")).unwrap();
    // An earlier attempt left PodScheduled=False.
    s.patch_status(
        "pods",
        Some("default"),
        "p",
        &Patch::Strategic(json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/0 nodes"}
        ]}})),
    )
    .unwrap();
    let rv_before: u64 = s.get("pods", Some("default"), "p").unwrap()["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let bound = s.bind("default", "p", "n1", None).unwrap();
    assert_eq!(bound["spec"]["nodeName"], "n1");
    let conditions = bound["status"]["conditions"].as_array().unwrap();
    let scheduled: Vec<_> = conditions
        .iter()
        .filter(|c| c["type"] == "PodScheduled")
        .collect();
    assert_eq!(scheduled.len(), 1, "{conditions:?}");
    assert_eq!(scheduled[0]["status"], "True");
    let rv_after: u64 = bound["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv_after > rv_before);
    // A second binding is a conflict.
    let err = s.bind("default", "p", "n1", None).unwrap_err();
    assert_eq!(err.code(), 409);
}

/// kube-apiserver 1.37 (ClearingNominatedNodeNameAfterBinding, on by default): the binding clears
/// the scheduler's nomination, and a bound pod may not be given a new one.
#[test]
fn binding_clears_the_nomination_and_a_bound_pod_gets_none() {
    let s = store();
    s.create(
        "nodes",
        None,
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}),
    )
    .unwrap();
    s.create("pods", Some("default"), pod("p")).unwrap();
    let nominate = |node: &str| {
        s.patch_status(
            "pods",
            Some("default"),
            "p",
            &Patch::Strategic(json!({"status": {"nominatedNodeName": node}})),
        )
    };
    let nominated = nominate("n1").unwrap();
    assert_eq!(nominated["status"]["nominatedNodeName"], "n1");
    let bound = s.bind("default", "p", "n1", None).unwrap();
    assert_eq!(bound["spec"]["nodeName"], "n1");
    assert!(
        bound["status"].get("nominatedNodeName").is_none(),
        "{:?}",
        bound["status"]
    );
    let err = nominate("n1").unwrap_err();
    assert_eq!(err.code(), 422);
    assert!(
        err.to_string()
            .contains("may not be set on pods that are already bound to a node"),
        "{err}"
    );
}

/// Empty metadata maps and lists vanish, as they do through kube-apiserver's typed structs: a
/// patch that only adds `annotations: {}` is no change (what `kubectl diff` relies on).
#[test]
fn empty_metadata_collections_are_dropped() {
    let s = store();
    let mut p = pod("e");
    p["metadata"]["annotations"] = json!({});
    p["metadata"]["finalizers"] = json!([]);
    p["metadata"]["labels"] = json!({"a": "b"});
    let created = s.create("pods", None, p).unwrap();
    assert!(created["metadata"].get("annotations").is_none());
    assert!(created["metadata"].get("finalizers").is_none());
    assert_eq!(created["metadata"]["labels"], json!({"a": "b"}));
    let rv = s.resource_version();
    let same = s
        .patch(
            "pods",
            Some("default"),
            "e",
            &Patch::Strategic(json!({"metadata": {"annotations": {}}})),
        )
        .unwrap();
    assert_eq!(same.resource_version(), created.resource_version());
    assert_eq!(s.resource_version(), rv);
    // Removing the last label removes the map.
    let unlabelled = s
        .patch(
            "pods",
            Some("default"),
            "e",
            &Patch::Merge(json!({"metadata": {"labels": {"a": null}}})),
        )
        .unwrap();
    assert!(unlabelled["metadata"].get("labels").is_none());
}

/// `metadata.generation` follows each kind's upstream strategy: spec changes of the main resource
/// count, metadata and status writes do not, and kinds without a reconciled spec have none.
#[test]
fn generation_counts_spec_changes_per_kind() {
    struct Case {
        what: &'static str,
        resource: &'static str,
        object: serde_json::Value,
        /// (merge patch, through `/status`?)
        patch: serde_json::Value,
        status: bool,
        /// Generation after create and after the patch (None: absent).
        created: Option<i64>,
        patched: Option<i64>,
    }
    let pdb = json!({"metadata": {"name": "b"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}});
    let class =
        json!({"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}});
    let deploy = json!({"metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "d"}},
        "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}}});
    let cases = [
        Case {
            what: "pod spec change",
            resource: "pods",
            object: pod("p1"),
            patch: json!({"spec": {"activeDeadlineSeconds": 30}}),
            status: false,
            created: Some(1),
            patched: Some(2),
        },
        Case {
            what: "pod label change",
            resource: "pods",
            object: pod("p2"),
            patch: json!({"metadata": {"labels": {"a": "b"}}}),
            status: false,
            created: Some(1),
            patched: Some(1),
        },
        Case {
            what: "pod status write",
            resource: "pods",
            object: pod("p3"),
            patch: json!({"status": {"phase": "Running"}}),
            status: true,
            created: Some(1),
            patched: Some(1),
        },
        Case {
            what: "pdb spec change",
            resource: "poddisruptionbudgets",
            object: pdb.clone(),
            patch: json!({"spec": {"minAvailable": 2}}),
            status: false,
            created: Some(1),
            patched: Some(2),
        },
        Case {
            what: "pdb status write",
            resource: "poddisruptionbudgets",
            object: pdb,
            patch: json!({"status": {"disruptionsAllowed": 1}}),
            status: true,
            created: Some(1),
            patched: Some(1),
        },
        Case {
            what: "device class spec change",
            resource: "deviceclasses",
            object: class.clone(),
            patch: json!({"spec": {"selectors": [{"cel": {"expression": "false"}}]}}),
            status: false,
            created: Some(1),
            patched: Some(2),
        },
        Case {
            what: "device class annotation",
            resource: "deviceclasses",
            object: class,
            patch: json!({"metadata": {"annotations": {"a": "b"}}}),
            status: false,
            created: Some(1),
            patched: Some(1),
        },
        Case {
            what: "deployment annotation",
            resource: "deployments",
            object: deploy.clone(),
            patch: json!({"metadata": {"annotations": {"a": "b"}}}),
            status: false,
            created: Some(1),
            patched: Some(2),
        },
        Case {
            what: "deployment label",
            resource: "deployments",
            object: deploy,
            patch: json!({"metadata": {"labels": {"a": "b"}}}),
            status: false,
            created: Some(1),
            patched: Some(1),
        },
        Case {
            what: "priority class description",
            resource: "priorityclasses",
            object: json!({"metadata": {"name": "pc"}, "value": 5}),
            patch: json!({"description": "changed"}),
            status: false,
            created: Some(1),
            patched: Some(1),
        },
        Case {
            what: "configmap data",
            resource: "configmaps",
            object: json!({"metadata": {"name": "cm"}, "data": {"a": "1"}}),
            patch: json!({"data": {"a": "2"}}),
            status: false,
            created: None,
            patched: None,
        },
        Case {
            what: "service spec",
            resource: "services",
            object: json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}}),
            patch: json!({"spec": {"ports": [{"port": 81}]}}),
            status: false,
            created: None,
            patched: None,
        },
        Case {
            what: "node spec",
            resource: "nodes",
            object: json!({"metadata": {"name": "n"}}),
            patch: json!({"spec": {"unschedulable": true}}),
            status: false,
            created: None,
            patched: None,
        },
    ];
    let s = store();
    for (i, mut c) in cases.into_iter().enumerate() {
        // Cases share object templates: each gets its own name.
        c.object["metadata"]["name"] = json!(format!("g{i}"));
        let created = s.create(c.resource, Some("default"), c.object).unwrap();
        let name = created.name().to_string();
        assert_eq!(
            created["metadata"]["generation"].as_i64(),
            c.created,
            "{}: after create",
            c.what
        );
        let p = Patch::Merge(c.patch);
        let patched = if c.status {
            s.patch_status(c.resource, Some("default"), &name, &p)
        } else {
            s.patch(c.resource, Some("default"), &name, &p)
        }
        .unwrap();
        assert_ne!(
            patched.resource_version(),
            created.resource_version(),
            "{}: the patch changed something",
            c.what
        );
        assert_eq!(
            patched["metadata"]["generation"].as_i64(),
            c.patched,
            "{}: after the patch",
            c.what
        );
    }
}

/// Binding a pod writes `spec.nodeName` without a new generation; the first deletionTimestamp
/// (a finalizer holds the object) is one.
#[test]
fn binding_keeps_and_deletion_bumps_the_generation() {
    let s = store();
    s.create("nodes", None, json!({"metadata": {"name": "n1"}}))
        .unwrap();
    let mut p = pod("held");
    p["metadata"]["finalizers"] = json!(["example.com/hold"]);
    s.create("pods", None, p).unwrap();
    let bound = s.bind("default", "held", "n1", None).unwrap();
    assert_eq!(bound["spec"]["nodeName"], "n1");
    assert_eq!(bound["metadata"]["generation"], 1);
    let d = s
        .delete("pods", Some("default"), "held", &DeleteOptions::default())
        .unwrap();
    let Deletion::Pending(o) = d else {
        panic!("a finalizer holds the pod")
    };
    assert_eq!(o["metadata"]["generation"], 2);
    // A second delete of an object already being deleted changes nothing.
    let again = s
        .delete("pods", Some("default"), "held", &DeleteOptions::default())
        .unwrap();
    assert_eq!(again.object()["metadata"]["generation"], 2);
    // Kinds without a generation get none on deletion either.
    s.create(
        "configmaps",
        None,
        json!({"metadata": {"name": "cm", "finalizers": ["example.com/hold"]}}),
    )
    .unwrap();
    let d = s
        .delete("configmaps", Some("default"), "cm", &DeleteOptions::default())
        .unwrap();
    assert!(d.object()["metadata"].get("generation").is_none());
}

/// kube-apiserver's Priority admission for PodGroups: the priority comes from the named class,
/// else from the global default class (whose name the group then carries), else 0; a class that
/// does not exist, or a given priority that disagrees, is refused in kube-apiserver's words.
#[test]
fn pod_groups_get_their_priority_from_their_class() {
    let group = |name: &str, spec: serde_json::Value| {
        let mut g = json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}}});
        for (k, v) in spec.as_object().unwrap() {
            g["spec"][k] = v.clone();
        }
        g
    };
    let s = store();
    s.create(
        "priorityclasses",
        None,
        json!({"metadata": {"name": "high"}, "value": 1000}),
    )
    .unwrap();
    // (name, spec fields, the priority and class admitted, or the refusal)
    let before_default: Vec<(&str, serde_json::Value, Result<(i64, Option<&str>), &str>)> = vec![
        (
            "named",
            json!({"priorityClassName": "high"}),
            Ok((1000, Some("high"))),
        ),
        ("unnamed", json!({}), Ok((0, None))),
        (
            "agrees",
            json!({"priorityClassName": "high", "priority": 1000}),
            Ok((1000, Some("high"))),
        ),
        (
            "disagrees",
            json!({"priorityClassName": "high", "priority": 5}),
            Err(
                "podgroups.scheduling.k8s.io \"disagrees\" is forbidden: priority set in the pod group (5) must \
                 match the priority computed (1000) based on the priority class set in the spec",
            ),
        ),
        (
            "missing",
            json!({"priorityClassName": "missing"}),
            Err(
                "podgroups.scheduling.k8s.io \"missing\" is forbidden: no PriorityClass with name missing was found",
            ),
        ),
    ];
    let check = |s: &Store, cases: Vec<(&str, serde_json::Value, Result<(i64, Option<&str>), &str>)>| {
        for (name, spec, want) in cases {
            match (s.create("podgroups", None, group(name, spec)), want) {
                (Ok(g), Ok((priority, class))) => {
                    assert_eq!(g["spec"]["priority"].as_i64(), Some(priority), "{name}");
                    assert_eq!(g["spec"]["priorityClassName"].as_str(), class, "{name}");
                }
                (Err(e), Err(message)) => {
                    assert_eq!(e.code(), 403, "{name}");
                    assert_eq!(e.to_string(), message, "{name}");
                }
                (got, want) => panic!("{name}: got {got:?}, want {want:?}"),
            }
        }
    };
    check(&s, before_default);
    s.create(
        "priorityclasses",
        None,
        json!({"metadata": {"name": "dflt"}, "value": 7, "globalDefault": true}),
    )
    .unwrap();
    check(&s, vec![("defaulted", json!({}), Ok((7, Some("dflt"))))]);
    // Only one class may be the global default.
    let second = s
        .create(
            "priorityclasses",
            None,
            json!({"metadata": {"name": "dflt-2"}, "value": 9, "globalDefault": true}),
        )
        .unwrap_err();
    assert_eq!(second.code(), 403);
    assert_eq!(
        second.to_string(),
        "priorityclasses.scheduling.k8s.io \"dflt-2\" is forbidden: PriorityClass dflt is already marked as \
         default. Only one default can exist"
    );
}
