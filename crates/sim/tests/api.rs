//! The API server driven through kube-rs: CRUD, concurrency, patches, selectors, paging, watches.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a failure is a panic.

mod common;

use std::time::Duration;

use common::{pod, pod_json, start, start_with};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Binding, Namespace, Node, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, ResourceExt,
    WatchEvent, WatchParams,
};
use kube::core::response::Status;
use kube::runtime::watcher;
use serde_json::json;
use unisched_sim::ApiServer;

fn api_err(e: kube::Error) -> Box<Status> {
    match e {
        kube::Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_get_list_generate_name_and_already_exists() {
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let created = pods.create(&PostParams::default(), &pod("a")).await.unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(meta.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    assert!(meta.resource_version.is_some());
    assert_eq!(
        created.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );
    assert_eq!(
        created.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()),
        Some("default-scheduler")
    );

    let got = pods.get("a").await.unwrap();
    assert_eq!(got.metadata.uid, meta.uid);

    let err = api_err(pods.create(&PostParams::default(), &pod("a")).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));

    let mut gen_pod = pod("");
    gen_pod.metadata.name = None;
    gen_pod.metadata.generate_name = Some("gen-".into());
    let g = pods.create(&PostParams::default(), &gen_pod).await.unwrap();
    let name = g.metadata.name.unwrap();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");

    let err = api_err(pods.get("missing").await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));

    let list = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 2);
    // Namespace must exist.
    let other: Api<Pod> = Api::namespaced(client.clone(), "nope");
    let err = api_err(other.create(&PostParams::default(), &pod("a")).await.unwrap_err());
    assert_eq!(err.code, 404);
    let nss: Api<Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "nope"}})).unwrap(),
    )
    .await
    .unwrap();
    other.create(&PostParams::default(), &pod("a")).await.unwrap();
    let all: Api<Pod> = Api::all(client);
    assert_eq!(all.list(&ListParams::default()).await.unwrap().items.len(), 3);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_errors_name_the_field() {
    let (server, client) = start().await;
    let raw: Api<DynamicObject> =
        Api::default_namespaced_with(client.clone(), &ApiResource::erase::<Pod>(&()));
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad"},
        "spec": {"containers": [{"name": "c", "image": "x", "ports": [{"containerPort": "eighty"}]}]},
    }))
    .unwrap();
    let err = api_err(raw.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert!(
        err.message.contains("spec.containers[0].ports[0].containerPort"),
        "{}",
        err.message
    );

    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "Bad_Name"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }))
    .unwrap();
    let err = api_err(raw.create(&PostParams::default(), &bad).await.unwrap_err());
    assert_eq!(err.code, 422);
    assert!(err.message.contains("metadata.name"), "{}", err.message);

    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "q"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "lots"}}}]},
    }))
    .unwrap();
    let err = api_err(raw.create(&PostParams::default(), &bad).await.unwrap_err());
    assert!(
        err.message.contains("spec.containers[0].resources.requests[cpu]"),
        "{}",
        err.message
    );

    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }))
    .unwrap();
    let err = api_err(raw.create(&PostParams::default(), &bad).await.unwrap_err());
    assert!(
        err.message.contains("name or generateName is required"),
        "{}",
        err.message
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_survive_a_round_trip() {
    let (server, client) = start().await;
    let ar = ApiResource::erase::<Pod>(&());
    let raw: Api<DynamicObject> = Api::default_namespaced_with(client, &ar);
    let mut p = pod_json("u");
    p["spec"]["futureField"] = json!({"x": [1, 2]});
    p["spec"]["containers"][0]["alphaThing"] = json!("keep-me");
    let obj: DynamicObject = serde_json::from_value(p).unwrap();
    raw.create(&PostParams::default(), &obj).await.unwrap();
    raw.patch(
        "u",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"b": "2"}}})),
    )
    .await
    .unwrap();
    let got = raw.get("u").await.unwrap();
    assert_eq!(got.data["spec"]["futureField"], json!({"x": [1, 2]}));
    assert_eq!(got.data["spec"]["containers"][0]["alphaThing"], "keep-me");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_updates_conflict_and_status_is_separate() {
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    let p = pods.create(&PostParams::default(), &pod("a")).await.unwrap();
    let mut newer = p.clone();
    newer
        .metadata
        .labels
        .get_or_insert_default()
        .insert("v".into(), "1".into());
    let updated = pods.replace("a", &PostParams::default(), &newer).await.unwrap();
    assert_ne!(updated.metadata.resource_version, p.metadata.resource_version);
    assert_eq!(
        updated.metadata.generation,
        Some(1),
        "metadata-only change keeps the generation"
    );

    let mut stale = p.clone();
    stale
        .metadata
        .labels
        .get_or_insert_default()
        .insert("v".into(), "2".into());
    let err = api_err(
        pods.replace("a", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));

    // Main-resource writes ignore status; /status writes status and, for pods (as upstream's
    // pod status strategy allows), labels, but never the spec.
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}, "metadata": {"labels": {"m": "1"}}})),
    )
    .await
    .unwrap();
    let got = pods.get("a").await.unwrap();
    assert_eq!(got.status.unwrap().phase.as_deref(), Some("Pending"));
    assert_eq!(
        got.metadata.labels.unwrap().get("m").map(String::as_str),
        Some("1")
    );
    pods.patch_status(
        "a",
        &PatchParams::default(),
        &Patch::Merge(
            json!({"status": {"phase": "Running"}, "metadata": {"labels": {"s": "1"}},
                             "spec": {"nodeName": "elsewhere"}}),
        ),
    )
    .await
    .unwrap();
    let got = pods.get("a").await.unwrap();
    assert_eq!(got.status.unwrap().phase.as_deref(), Some("Running"));
    assert!(got.metadata.labels.unwrap().contains_key("s"));
    assert_eq!(got.spec.unwrap().node_name, None);

    // Merge patch with a stale resourceVersion conflicts.
    let err = api_err(
        pods.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"resourceVersion": p.metadata.resource_version, "labels": {"z": "1"}}}),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 409);

    // Pod spec is immutable except for the allowed fields.
    let err = api_err(
        pods.patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": "n1"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}})),
    )
    .await
    .unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patch_flavours() {
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.create(&PostParams::default(), &pod("a")).await.unwrap();
    // Strategic merge: conditions merge by type.
    let cond = |t: &str, s: &str| json!({"type": t, "status": s});
    pods.patch_status(
        "a",
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [cond("PodScheduled", "False")]}})),
    )
    .await
    .unwrap();
    pods.patch_status(
        "a",
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [cond("Ready", "False")]}})),
    )
    .await
    .unwrap();
    pods.patch_status(
        "a",
        &PatchParams::default(),
        &Patch::Strategic(json!({"status": {"conditions": [cond("PodScheduled", "True")]}})),
    )
    .await
    .unwrap();
    let conds = pods.get("a").await.unwrap().status.unwrap().conditions.unwrap();
    let summary: Vec<(String, String)> = conds.into_iter().map(|c| (c.type_, c.status)).collect();
    assert_eq!(
        summary,
        vec![
            ("PodScheduled".into(), "True".into()),
            ("Ready".into(), "False".into())
        ]
    );

    // JSON patch, including a failing test operation.
    let jp: json_patch::Patch = serde_json::from_value(json!([
        {"op": "add", "path": "/metadata/labels/tier", "value": "fe"},
        {"op": "replace", "path": "/metadata/labels/app", "value": "db"},
    ]))
    .unwrap();
    let p = pods
        .patch("a", &PatchParams::default(), &Patch::Json::<()>(jp))
        .await
        .unwrap();
    let labels = p.metadata.labels.unwrap();
    assert_eq!((labels["tier"].as_str(), labels["app"].as_str()), ("fe", "db"));
    let jp: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/metadata/labels/app", "value": "web"}]))
            .unwrap();
    let err = api_err(
        pods.patch("a", &PatchParams::default(), &Patch::Json::<()>(jp))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 422);

    // Finalizers merge as a set; $patch: delete removes a list item.
    pods.patch(
        "a",
        &PatchParams::default(),
        &Patch::Strategic(json!({"metadata": {"finalizers": ["a/x"]}})),
    )
    .await
    .unwrap();
    let p = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"finalizers": ["a/y", "a/x"]}})),
        )
        .await
        .unwrap();
    assert_eq!(
        p.metadata.finalizers.unwrap(),
        vec!["a/x".to_string(), "a/y".to_string()]
    );
    let p = pods
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a/x", "a/y"]}})),
        )
        .await
        .unwrap();
    assert!(p.metadata.finalizers.unwrap_or_default().is_empty());

    // Server-side apply (approximated): creates, then merges.
    let ssa = PatchParams::apply("test").force();
    let applied = pods.patch("b", &ssa, &Patch::Apply(pod_json("b"))).await.unwrap();
    assert_eq!(applied.metadata.name.as_deref(), Some("b"));
    let applied = pods
        .patch(
            "b",
            &ssa,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b", "labels": {"x": "y"}}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(applied.metadata.labels.unwrap()["x"], "y");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_sets_node_once_and_checks_uid() {
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    let p = pods.create(&PostParams::default(), &pod("a")).await.unwrap();
    let binding = |uid: Option<String>| Binding {
        metadata: ObjectMeta {
            name: Some("a".into()),
            namespace: Some("default".into()),
            uid,
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some("n1".into()),
            ..Default::default()
        },
    };
    let err = api_err(
        pods.create_subresource::<_, Status>(
            "binding",
            "a",
            &PostParams::default(),
            &binding(Some("wrong-uid".into())),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    // What a binding carries lands in the pod without the pod's validation, so a body that is
    // not a Binding (an annotation that is not a string) is refused before anything is written.
    let err = api_err(
        pods.create_subresource::<_, Status>(
            "binding",
            "a",
            &PostParams::default(),
            &serde_json::json!({"metadata": {"name": "a", "annotations": {"n": 1}},
                                "target": {"kind": "Node", "name": "n1"}}),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 400, "{}", err.message);
    assert!(err.message.contains("annotations"), "{}", err.message);
    assert_eq!(pods.get("a").await.unwrap().spec.unwrap().node_name, None);
    let mut with_annotation = binding(p.metadata.uid.clone());
    with_annotation.metadata.annotations =
        Some([("example.com/bound-by".to_string(), "test".to_string())].into());
    let st: Status = pods
        .create_subresource("binding", "a", &PostParams::default(), &with_annotation)
        .await
        .unwrap();
    assert!(st.is_success());
    let got = pods.get("a").await.unwrap();
    assert_eq!(
        got.metadata
            .annotations
            .unwrap_or_default()
            .get("example.com/bound-by")
            .map(String::as_str),
        Some("test"),
        "the binding's annotations are copied to the pod"
    );
    assert_eq!(got.spec.unwrap().node_name.as_deref(), Some("n1"));
    let conditions = got.status.unwrap().conditions.unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "True"),
        "binding marks the pod PodScheduled=True, as kube-apiserver does: {conditions:?}"
    );
    let err = api_err(
        pods.create_subresource::<_, Status>("binding", "a", &PostParams::default(), &binding(None))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 409);
    assert!(err.message.contains("already assigned"), "{}", err.message);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finalizers_keep_object_until_removed() {
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    let mut p = pod("f");
    p.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    pods.create(&PostParams::default(), &p).await.unwrap();
    let res = pods.delete("f", &DeleteParams::default()).await.unwrap();
    let kept = res
        .left()
        .expect("the object is returned while finalizers remain");
    assert!(kept.metadata.deletion_timestamp.is_some());
    assert!(pods.get("f").await.unwrap().metadata.deletion_timestamp.is_some());
    // No new finalizers while deleting.
    let err = api_err(
        pods.patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "x/y"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    pods.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let err = api_err(pods.get("f").await.unwrap_err());
    assert_eq!(err.code, 404);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owned_objects_are_garbage_collected() {
    let (server, client) = start_with(ApiServer::builder().kubelet(None).claim_controller(false)).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let owner = nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(common::node_json("owner", "4", "10")).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let mut dep = pod("dep");
    dep.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: "owner".into(),
            uid: owner.metadata.uid.clone().unwrap(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        },
    ]);
    pods.create(&PostParams::default(), &dep).await.unwrap();
    // A dependent of a kind this server does not serve is left alone.
    let mut foreign = pod("foreign");
    foreign.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apps/v1".into(),
            kind: "ReplicaSet".into(),
            name: "rs".into(),
            uid: "00000000-0000-4000-8000-000000000000".into(),
            ..Default::default()
        },
    ]);
    pods.create(&PostParams::default(), &foreign).await.unwrap();

    nodes.delete("owner", &DeleteParams::default()).await.unwrap();
    let gone = common::eventually(Duration::from_secs(5), || async {
        match pods.get("dep").await {
            Err(kube::Error::Api(s)) if s.code == 404 => Some(()),
            _ => None,
        }
    })
    .await;
    assert!(gone.is_some(), "the dependent was not collected");
    assert!(pods.get("foreign").await.is_ok());

    // Orphan propagation keeps the dependent and drops the reference.
    let owner = nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(common::node_json("owner2", "4", "10")).unwrap(),
        )
        .await
        .unwrap();
    let mut dep = pod("dep2");
    dep.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "v1".into(),
            kind: "Node".into(),
            name: "owner2".into(),
            uid: owner.metadata.uid.clone().unwrap(),
            ..Default::default()
        },
    ]);
    pods.create(&PostParams::default(), &dep).await.unwrap();
    nodes.delete("owner2", &DeleteParams::orphan()).await.unwrap();
    let orphaned = common::eventually(Duration::from_secs(5), || async {
        let owner_gone = matches!(nodes.get("owner2").await, Err(kube::Error::Api(s)) if s.code == 404);
        let p = pods.get("dep2").await.ok()?;
        (owner_gone && p.metadata.owner_references.unwrap_or_default().is_empty()).then_some(())
    })
    .await;
    assert!(orphaned.is_some(), "orphan deletion did not complete");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn label_and_field_selectors() {
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for (name, app, node) in [
        ("a", "web", ""),
        ("b", "web", "n1"),
        ("c", "db", "n1"),
        ("d", "cache", "n2"),
    ] {
        let mut p = pod(name);
        p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        if !node.is_empty() {
            p.spec.as_mut().unwrap().node_name = Some(node.into());
        }
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let names = |l: kube::core::ObjectList<Pod>| {
        l.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    let q = |s: &str| ListParams::default().labels(s);
    assert_eq!(names(pods.list(&q("app=web")).await.unwrap()), ["a", "b"]);
    assert_eq!(names(pods.list(&q("app!=web")).await.unwrap()), ["c", "d"]);
    assert_eq!(
        names(pods.list(&q("app in (db,cache)")).await.unwrap()),
        ["c", "d"]
    );
    assert_eq!(
        names(pods.list(&q("app notin (db,cache)")).await.unwrap()),
        ["a", "b"]
    );
    assert_eq!(names(pods.list(&q("app")).await.unwrap()).len(), 4);
    assert!(names(pods.list(&q("!app")).await.unwrap()).is_empty());
    let f = |s: &str| ListParams::default().fields(s);
    assert_eq!(names(pods.list(&f("spec.nodeName=")).await.unwrap()), ["a"]);
    assert_eq!(
        names(pods.list(&f("spec.nodeName=n1")).await.unwrap()),
        ["b", "c"]
    );
    assert_eq!(
        names(pods.list(&f("spec.nodeName!=n1,spec.nodeName!=")).await.unwrap()),
        ["d"]
    );
    assert_eq!(names(pods.list(&f("metadata.name=c")).await.unwrap()), ["c"]);
    assert_eq!(
        names(
            pods.list(&f("metadata.namespace=default,status.phase=Pending"))
                .await
                .unwrap()
        )
        .len(),
        4
    );
    assert_eq!(
        names(
            pods.list(&f("spec.schedulerName=default-scheduler,status.phase!=Failed"))
                .await
                .unwrap()
        )
        .len(),
        4
    );
    let err = api_err(pods.list(&q("app in web")).await.unwrap_err());
    assert_eq!(err.code, 400);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pagination_with_limit_and_continue_and_410() {
    let (server, client) = start_with(ApiServer::builder().controllers(false).history(30)).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for i in 0..7 {
        pods.create(&PostParams::default(), &pod(&format!("p{i}")))
            .await
            .unwrap();
    }
    let first = pods.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(first.items.len(), 3);
    assert_eq!(first.metadata.remaining_item_count, Some(4));
    let token = first.metadata.continue_.clone().unwrap();
    // Changes after the first page are not seen by later pages (consistent snapshot).
    pods.delete("p4", &DeleteParams::default()).await.unwrap();
    pods.create(&PostParams::default(), &pod("p9")).await.unwrap();
    let second = pods
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    let names: Vec<_> = second
        .items
        .iter()
        .map(|p| p.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["p3", "p4", "p5"]);
    assert_eq!(second.metadata.resource_version, first.metadata.resource_version);
    let third = pods
        .list(
            &ListParams::default()
                .limit(3)
                .continue_token(second.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(third.items.len(), 1);
    assert!(third.metadata.continue_.is_none());
    // Paging through with kube's helper.
    let all = pods.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(all.items.len(), 2);

    // Push the first page's version out of the 30-event history: the token expires.
    for i in 0..40 {
        pods.patch(
            "p0",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"i": i.to_string()}}})),
        )
        .await
        .unwrap();
    }
    let err = api_err(
        pods.list(&ListParams::default().limit(3).continue_token(&token))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (410, "Expired"));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_in_order_and_expires_with_410() {
    let (server, client) = start_with(ApiServer::builder().controllers(false).history(50)).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let p = pods.create(&PostParams::default(), &pod("w")).await.unwrap();
    let start_rv = p.metadata.resource_version.clone().unwrap();
    for i in 0..5 {
        pods.patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"i": i.to_string()}}})),
        )
        .await
        .unwrap();
    }
    pods.delete("w", &DeleteParams::default()).await.unwrap();
    let mut stream = pods
        .watch(&WatchParams::default().timeout(5), &start_rv)
        .await
        .unwrap()
        .boxed();
    let mut seen = Vec::new();
    while seen.len() < 6 {
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Modified(p) => seen.push(format!("M{}", p.metadata.labels.unwrap()["i"])),
            WatchEvent::Deleted(_) => seen.push("D".into()),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(seen, ["M0", "M1", "M2", "M3", "M4", "D"]);
    drop(stream);

    // Too old: an ERROR event with a 410 Status.
    for i in 0..60 {
        pods.create(&PostParams::default(), &pod(&format!("x{i}")))
            .await
            .unwrap();
    }
    let mut stream = pods
        .watch(&WatchParams::default().timeout(5), &start_rv)
        .await
        .unwrap()
        .boxed();
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Error(s) => assert_eq!((s.code, s.reason.as_str()), (410, "Expired")),
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_bookmarks_selectors_and_initial_events() {
    let (server, client) = start_with(
        ApiServer::builder()
            .controllers(false)
            .bookmark_interval(Duration::from_millis(100)),
    )
    .await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &pod("a")).await.unwrap();
    let rv = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut params = WatchParams::default().fields("spec.nodeName=").timeout(5);
    params.bookmarks = true;
    let mut stream = pods.watch(&params, &rv).await.unwrap().boxed();
    // A bookmark arrives while nothing happens.
    match stream.try_next().await.unwrap().unwrap() {
        WatchEvent::Bookmark(b) => assert!(!b.metadata.resource_version.is_empty()),
        other => panic!("expected a bookmark, got {other:?}"),
    }
    // Binding the pod makes it leave the `spec.nodeName=` selector: DELETED for this watcher.
    pods.create_subresource::<_, Status>(
        "binding",
        "a",
        &PostParams::default(),
        &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "a"}, "target": {"kind": "Node", "name": "n1"}}),
    )
    .await
    .unwrap();
    loop {
        match stream.try_next().await.unwrap().unwrap() {
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Deleted(p) => {
                assert_eq!(p.metadata.name.as_deref(), Some("a"));
                break;
            }
            other => panic!("expected DELETED, got {other:?}"),
        }
    }
    drop(stream);

    // The kube-rs watcher (list + watch) and the streaming-list variant both see the object.
    let w = watcher(pods.clone(), watcher::Config::default()).boxed();
    let names = w
        .try_filter_map(|e| async move {
            Ok(match e {
                watcher::Event::InitApply(p) | watcher::Event::Apply(p) => p.metadata.name,
                _ => None,
            })
        })
        .take(1)
        .try_collect::<Vec<_>>();
    let got = tokio::time::timeout(Duration::from_secs(5), names)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, ["a"]);
    let w = watcher(pods.clone(), watcher::Config::default().streaming_lists()).boxed();
    let init_done = w
        .try_filter_map(|e| async move { Ok(matches!(e, watcher::Event::InitDone).then_some(())) })
        .take(1)
        .try_collect::<Vec<_>>();
    tokio::time::timeout(Duration::from_secs(5), init_done)
        .await
        .unwrap()
        .unwrap();
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_watcher_sees_events_in_order() {
    let (server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let events = watcher(pods.clone(), watcher::Config::default())
        .try_filter_map(|e| async move {
            Ok(match e {
                watcher::Event::Apply(p) => Some(format!("apply:{}", p.metadata.name.unwrap())),
                watcher::Event::Delete(p) => Some(format!("delete:{}", p.metadata.name.unwrap())),
                watcher::Event::InitDone => Some("init".into()),
                _ => None,
            })
        })
        .take(5)
        .try_collect::<Vec<_>>();
    let writer = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for n in ["a", "b", "c"] {
            pods.create(&PostParams::default(), &pod(n)).await.unwrap();
        }
        pods.delete("b", &DeleteParams::default()).await.unwrap();
    };
    let (got, ()) = tokio::join!(tokio::time::timeout(Duration::from_secs(10), events), writer);
    assert_eq!(
        got.unwrap().unwrap(),
        ["init", "apply:a", "apply:b", "apply:c", "delete:b"]
    );
    server.shutdown().await;
}

/// `dryRun=All` on every verb: the request is validated and admitted, the answer is what would be
/// stored, and nothing is stored: no resourceVersion moves and no watch event is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_on_create_update_patch_and_delete_stores_nothing() {
    let (server, client) = start().await;
    let store = server.store();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let rv0 = store.resource_version();
    let mut events = pods
        .watch(&WatchParams::default(), &rv0.to_string())
        .await
        .unwrap()
        .boxed();

    // create: defaults and a uid as if stored, no resourceVersion, nothing in the store.
    let created = pods.create(&dry, &pod("d")).await.unwrap();
    assert!(created.metadata.uid.as_deref().is_some_and(|u| u.len() == 36));
    assert!(
        created
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
            .is_empty()
    );
    assert_eq!(
        created.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()),
        Some("default-scheduler")
    );
    assert!(store.try_get("pods", Some("default"), "d").is_none());
    // Admission runs: an invalid pod is refused also in a dry run.
    let mut bad = pod("bad");
    bad.spec.as_mut().unwrap().containers.clear();
    let err = api_err(pods.create(&dry, &bad).await.unwrap_err());
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(store.resource_version(), rv0);

    let real = pods.create(&PostParams::default(), &pod("d")).await.unwrap();
    let rv1 = store.resource_version();
    assert!(matches!(events.next().await, Some(Ok(WatchEvent::Added(_)))));

    // update
    let mut changed = real.clone();
    changed.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
    let updated = pods.replace("d", &dry, &changed).await.unwrap();
    assert_eq!(updated.labels().get("app").map(String::as_str), Some("db"));
    assert_eq!(updated.metadata.resource_version, real.metadata.resource_version);
    assert_eq!(
        store.get("pods", Some("default"), "d").unwrap()["metadata"]["labels"]["app"],
        "web"
    );

    // patch (merge and server-side apply)
    let pp = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    let patched = pods
        .patch(
            "d",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "x"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.labels().get("tier").map(String::as_str), Some("x"));
    let applied = pods
        .patch(
            "d",
            &PatchParams::apply("test").dry_run(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "d", "labels": {"tier": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(applied.labels().get("tier").map(String::as_str), Some("y"));
    assert!(
        store.get("pods", Some("default"), "d").unwrap()["metadata"]["labels"]
            .get("tier")
            .is_none()
    );
    // A dry-run patch that would create (apply of a missing object) creates nothing.
    pods.patch(
        "new",
        &PatchParams::apply("test").dry_run(),
        &Patch::Apply(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "new"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}}),
        ),
    )
    .await
    .unwrap();
    assert!(store.try_get("pods", Some("default"), "new").is_none());

    // delete
    let dp = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    pods.delete("d", &dp).await.unwrap();
    assert!(store.try_get("pods", Some("default"), "d").is_some());

    assert_eq!(store.resource_version(), rv1);
    // No event for any of the dry runs: the next one seen is the real delete.
    pods.delete("d", &DeleteParams::default()).await.unwrap();
    match events.next().await {
        Some(Ok(WatchEvent::Deleted(p))) => assert_eq!(p.metadata.name.as_deref(), Some("d")),
        other => panic!("expected the real delete, got {other:?}"),
    }
}

/// GETs `path` as a `meta.k8s.io/v1` Table (what `kubectl get` asks for).
async fn get_table(client: &kube::Client, path: &str) -> serde_json::Value {
    let req = axum::http::Request::get(path)
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap()
}

/// The column names and each row's cells by name, for the priority-0 columns kubectl shows.
fn table_rows(t: &serde_json::Value) -> (Vec<String>, Vec<Vec<serde_json::Value>>) {
    let cols = t["columnDefinitions"].as_array().unwrap();
    let shown: Vec<usize> = (0..cols.len()).filter(|i| cols[*i]["priority"] == 0).collect();
    let names = shown
        .iter()
        .map(|i| cols[*i]["name"].as_str().unwrap().to_uppercase())
        .collect();
    let rows = t["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| shown.iter().map(|i| r["cells"][*i].clone()).collect())
        .collect();
    (names, rows)
}

/// Services and Deployments print the columns kubectl shows against kube-apiserver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_and_deployment_tables_have_upstream_columns() {
    let (server, client) = start().await;
    let store = server.store();
    let services = [
        json!({"metadata": {"name": "a-plain"}, "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}}),
        json!({"metadata": {"name": "b-node"}, "spec": {"type": "NodePort", "clusterIP": "10.0.0.7", "clusterIPs": ["10.0.0.7"],
            "externalIPs": ["1.2.3.4"], "ports": [{"port": 443, "nodePort": 30443, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}]}}),
        json!({"metadata": {"name": "c-lb"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 8080}]}}),
        json!({"metadata": {"name": "d-lb-up"}, "spec": {"type": "LoadBalancer", "ports": [{"port": 8080}]},
            "status": {"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}, {"ip": "5.6.7.8"}]}}}),
        json!({"metadata": {"name": "e-ext"}, "spec": {"type": "ExternalName", "externalName": "db.example.com"}}),
    ];
    for svc in services {
        let name = svc["metadata"]["name"].as_str().unwrap().to_string();
        let status = svc.get("status").cloned();
        store.create("services", Some("default"), svc).unwrap();
        if let Some(status) = status {
            store
                .patch_status(
                    "services",
                    Some("default"),
                    &name,
                    &unisched_sim::Patch::Merge(json!({"status": status})),
                )
                .unwrap();
        }
    }
    let t = get_table(&client, "/api/v1/namespaces/default/services").await;
    let (cols, rows) = table_rows(&t);
    assert_eq!(
        cols,
        ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    );
    let without_age = |r: &Vec<serde_json::Value>| r[..5].to_vec();
    let expected = [
        json!(["a-plain", "ClusterIP", "<none>", "<none>", "80/TCP"]),
        json!([
            "b-node",
            "NodePort",
            "10.0.0.7",
            "1.2.3.4",
            "443:30443/TCP,53/UDP"
        ]),
        json!(["c-lb", "LoadBalancer", "<none>", "<pending>", "8080/TCP"]),
        json!([
            "d-lb-up",
            "LoadBalancer",
            "<none>",
            "5.6.7.8,lb.example.com",
            "8080/TCP"
        ]),
        json!(["e-ext", "ExternalName", "<none>", "db.example.com", "<none>"]),
    ];
    assert_eq!(rows.len(), expected.len());
    for (row, want) in rows.iter().zip(expected) {
        assert_eq!(json!(without_age(row)), want);
        assert!(row[5].as_str().unwrap().ends_with('s'), "AGE: {row:?}");
    }
    // The wide SELECTOR column (`kubectl get -o wide`).
    assert_eq!(t["rows"][0]["cells"][6], "app=web");

    let deployment = |name: &str, replicas: Option<i64>| {
        let mut d = json!({"metadata": {"name": name}, "spec": {
            "selector": {"matchLabels": {"app": name}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]},
            "template": {"metadata": {"labels": {"app": name, "tier": "a"}},
                "spec": {"containers": [{"name": "c", "image": "nginx:1"}, {"name": "side", "image": "busybox"}]}}}});
        if let Some(r) = replicas {
            d["spec"]["replicas"] = json!(r);
        }
        d
    };
    store
        .create("deployments", Some("default"), deployment("one", None))
        .unwrap();
    store
        .create("deployments", Some("default"), deployment("three", Some(3)))
        .unwrap();
    store
        .patch_status(
            "deployments",
            Some("default"),
            "three",
            &unisched_sim::Patch::Merge(json!({"status": {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 1}})),
        )
        .unwrap();
    let t = get_table(&client, "/apis/apps/v1/namespaces/default/deployments").await;
    let (cols, rows) = table_rows(&t);
    assert_eq!(cols, ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]);
    assert_eq!(json!(rows[0][..4]), json!(["one", "0/1", 0, 0]));
    assert_eq!(json!(rows[1][..4]), json!(["three", "2/3", 3, 1]));
    assert_eq!(
        json!(t["rows"][1]["cells"].as_array().unwrap()[5..]),
        json!(["c,side", "nginx:1,busybox", "app=three,tier in (a,b)"])
    );
    server.shutdown().await;
}

/// `as=PartialObjectMetadata` (client-go's metadata client; unisched's claim and pod-status writes)
/// answers a GET or a write, of the object or its status, with the object's metadata only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_only_replies_for_reads_and_writes() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &pod("m")).await.unwrap();

    let meta = pods.get_metadata("m").await.unwrap();
    assert_eq!(meta.metadata.name.as_deref(), Some("m"));
    assert_eq!(
        meta.types
            .as_ref()
            .map(|t| (t.api_version.as_str(), t.kind.as_str())),
        Some(("meta.k8s.io/v1", "PartialObjectMetadata"))
    );

    // A status patch with the metadata Accept header: the reply has the new version, no spec or status.
    let req = axum::http::Request::patch("/api/v1/namespaces/default/pods/m/status")
        .header(
            "Accept",
            "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1",
        )
        .header("Content-Type", "application/merge-patch+json")
        .body(serde_json::to_vec(&json!({"status": {"nominatedNodeName": "n1"}})).unwrap())
        .unwrap();
    let reply: serde_json::Value = serde_json::from_str(&client.request_text(req).await.unwrap()).unwrap();
    assert_eq!(reply["kind"], "PartialObjectMetadata");
    assert!(
        reply.get("spec").is_none() && reply.get("status").is_none(),
        "{reply}"
    );
    let stored = pods.get("m").await.unwrap();
    assert_eq!(
        stored.status.and_then(|s| s.nominated_node_name).as_deref(),
        Some("n1"),
        "the write applied"
    );
    assert_eq!(
        reply["metadata"]["resourceVersion"].as_str(),
        stored.metadata.resource_version.as_deref()
    );
    assert_ne!(meta.metadata.resource_version, stored.metadata.resource_version);

    // Without the header the whole object comes back, as before.
    let whole = pods
        .patch(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert!(whole.spec.is_some());
}
