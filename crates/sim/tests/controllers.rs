//! The in-process controllers: ResourceClaim controller and fake kubelet, observed through kube-rs.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a failure is a panic.

mod common;

use std::time::Duration;

use common::{eventually, node_json, pod_with_cpu, start_with};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimTemplate};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::core::response::Status;
use serde_json::json;
use unisched_sim::ApiServer;

async fn bind(pods: &Api<Pod>, name: &str, node: &str) {
    let _: Status = pods
        .create_subresource(
            "binding",
            name,
            &PostParams::default(),
            &json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"kind": "Node", "name": node}}),
        )
        .await
        .unwrap();
}

async fn wait_phase(pods: &Api<Pod>, name: &str, phase: &str) -> Pod {
    eventually(Duration::from_secs(5), || async {
        let p = pods.get(name).await.ok()?;
        (p.status.as_ref()?.phase.as_deref() == Some(phase)).then_some(p)
    })
    .await
    .unwrap_or_else(|| panic!("pod {name} did not reach {phase}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_runs_bound_pods_and_rejects_overcommit() {
    let (server, client) = start_with(ApiServer::builder()).await;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(node_json("n1", "4", "3")).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());

    pods.create(&PostParams::default(), &pod_with_cpu("big", "3"))
        .await
        .unwrap();
    bind(&pods, "big", "n1").await;
    let running = wait_phase(&pods, "big", "Running").await;
    let status = running.status.unwrap();
    let conds: Vec<(String, String)> = status
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    for t in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
    ] {
        assert!(
            conds.contains(&(t.to_string(), "True".to_string())),
            "{t} missing in {conds:?}"
        );
    }
    assert!(status.start_time.is_some());
    assert!(status.pod_ip.is_some());
    let cs = status.container_statuses.unwrap();
    assert!(cs[0].ready && cs[0].state.as_ref().unwrap().running.is_some());

    pods.create(&PostParams::default(), &pod_with_cpu("extra", "2"))
        .await
        .unwrap();
    bind(&pods, "extra", "n1").await;
    let failed = wait_phase(&pods, "extra", "Failed").await.status.unwrap();
    assert_eq!(failed.reason.as_deref(), Some("OutOfcpu"));
    assert_eq!(
        failed.message.as_deref(),
        Some(
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 2000, used: 3000, capacity: 4000"
        )
    );

    // A pod that completes frees its share.
    let mut short = pod_with_cpu("short", "1");
    short.metadata.annotations =
        Some([("sim.unisched.io/run-seconds".to_string(), "0.2".to_string())].into());
    pods.create(&PostParams::default(), &short).await.unwrap();
    bind(&pods, "short", "n1").await;
    wait_phase(&pods, "short", "Succeeded").await;
    pods.create(&PostParams::default(), &pod_with_cpu("after", "1"))
        .await
        .unwrap();
    bind(&pods, "after", "n1").await;
    wait_phase(&pods, "after", "Running").await;

    // Pod count: big + after are running; allocatable pods is 3.
    pods.create(&PostParams::default(), &pod_with_cpu("third", "0"))
        .await
        .unwrap();
    bind(&pods, "third", "n1").await;
    wait_phase(&pods, "third", "Running").await;
    pods.create(&PostParams::default(), &pod_with_cpu("fourth", "0"))
        .await
        .unwrap();
    bind(&pods, "fourth", "n1").await;
    let failed = wait_phase(&pods, "fourth", "Failed").await.status.unwrap();
    assert_eq!(failed.reason.as_deref(), Some("OutOfpods"));
    server.shutdown().await;
}

/// The kubelet's admission sum must stay exact. Two 9e15-CPU pods on a 9e15-CPU node
/// overflow an `i64` milli-CPU total; a wrapping sum admitted the second one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_admission_is_exact_for_huge_requests() {
    let (server, client) = start_with(ApiServer::builder()).await;
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(node_json("big", "9e15", "10")).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(&PostParams::default(), &pod_with_cpu("a", "9e15"))
        .await
        .unwrap();
    bind(&pods, "a", "big").await;
    wait_phase(&pods, "a", "Running").await;
    for (name, cpu, requested) in [
        ("b", "9e15", "9000000000000000000"),
        ("c", "8e15", "8000000000000000000"),
    ] {
        pods.create(&PostParams::default(), &pod_with_cpu(name, cpu))
            .await
            .unwrap();
        bind(&pods, name, "big").await;
        let failed = wait_phase(&pods, name, "Failed").await.status.unwrap();
        assert_eq!(failed.reason.as_deref(), Some("OutOfcpu"), "{name}");
        assert_eq!(
            failed.message.as_deref(),
            Some(
                format!(
                    "Pod was rejected: Node didn't have enough resource: cpu, requested: {requested}, used: 9000000000000000000, capacity: 9000000000000000000"
                )
                .as_str()
            ),
            "{name}"
        );
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_controller_creates_claims_from_templates_and_cleans_up() {
    let (server, client) = start_with(ApiServer::builder().kubelet(None)).await;
    let templates: Api<ResourceClaimTemplate> = Api::default_namespaced(client.clone());
    templates
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
                "metadata": {"name": "gpu-tpl"},
                "spec": {
                    "metadata": {"labels": {"team": "ml"}, "annotations": {"note": "from-template"}},
                    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
                },
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let mut p: Pod = serde_json::from_value(common::pod_json("trainer")).unwrap();
    p.spec.as_mut().unwrap().resource_claims = Some(vec![
        serde_json::from_value(json!({"name": "gpu", "resourceClaimTemplateName": "gpu-tpl"})).unwrap(),
    ]);
    let p = pods.create(&PostParams::default(), &p).await.unwrap();
    let pod_uid = p.metadata.uid.clone().unwrap();

    let claim_name = eventually(Duration::from_secs(5), || async {
        let p = pods.get("trainer").await.ok()?;
        p.status?
            .resource_claim_statuses?
            .first()?
            .resource_claim_name
            .clone()
    })
    .await
    .expect("pod status records the generated claim");
    assert!(claim_name.starts_with("trainer-gpu-"), "{claim_name}");

    let claims: Api<ResourceClaim> = Api::default_namespaced(client.clone());
    let claim = claims.get(&claim_name).await.unwrap();
    let owner = &claim.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.uid.as_str(),
            owner.controller,
            owner.block_owner_deletion
        ),
        ("Pod", pod_uid.as_str(), Some(true), Some(true))
    );
    let ann = claim.metadata.annotations.clone().unwrap();
    assert_eq!(ann["resource.kubernetes.io/pod-claim-name"], "gpu");
    assert_eq!(ann["note"], "from-template");
    assert_eq!(claim.metadata.labels.clone().unwrap()["team"], "ml");
    let req = &claim
        .spec
        .as_ref()
        .unwrap()
        .devices
        .as_ref()
        .unwrap()
        .requests
        .as_ref()
        .unwrap()[0];
    assert_eq!(req.name, "gpu");

    // Play the scheduler: allocate, protect, reserve for the pod.
    claims
        .patch(
            &claim_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["resource.kubernetes.io/delete-protection"]}})),
        )
        .await
        .unwrap();
    claims
        .patch_status(
            &claim_name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "allocation": {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}]}},
                "reservedFor": [{"resource": "pods", "name": "trainer", "uid": pod_uid}],
            }})),
        )
        .await
        .unwrap();
    // The pod finishes: reservation released, allocation cleared, finalizer removed, claim deleted.
    pods.patch_status(
        "trainer",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
    )
    .await
    .unwrap();
    let gone = eventually(Duration::from_secs(5), || async {
        match claims.get(&claim_name).await {
            Err(kube::Error::Api(s)) if s.code == 404 => Some(()),
            _ => None,
        }
    })
    .await;
    assert!(gone.is_some(), "the generated claim of a finished pod is deleted");

    // A second pod: its claim goes away with the pod (owner garbage collection).
    let mut p2: Pod = serde_json::from_value(common::pod_json("second")).unwrap();
    p2.spec.as_mut().unwrap().resource_claims = Some(vec![
        serde_json::from_value(json!({"name": "gpu", "resourceClaimTemplateName": "gpu-tpl"})).unwrap(),
    ]);
    pods.create(&PostParams::default(), &p2).await.unwrap();
    let claim2 = eventually(Duration::from_secs(5), || async {
        pods.get("second")
            .await
            .ok()?
            .status?
            .resource_claim_statuses?
            .first()?
            .resource_claim_name
            .clone()
    })
    .await
    .unwrap();
    // Reserved and allocated while the pod exists.
    claims
        .patch(
            &claim2,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["resource.kubernetes.io/delete-protection"]}})),
        )
        .await
        .unwrap();
    let pod2 = pods.get("second").await.unwrap();
    claims
        .patch_status(
            &claim2,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "allocation": {"devices": {"results": []}},
                "reservedFor": [{"resource": "pods", "name": "second", "uid": pod2.metadata.uid}],
            }})),
        )
        .await
        .unwrap();
    pods.delete("second", &DeleteParams::default()).await.unwrap();
    let gone = eventually(Duration::from_secs(5), || async {
        match claims.get(&claim2).await {
            Err(kube::Error::Api(s)) if s.code == 404 => Some(()),
            _ => None,
        }
    })
    .await;
    assert!(gone.is_some(), "the claim of a deleted pod is collected");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_controller_waits_for_a_missing_template() {
    let (server, client) = start_with(ApiServer::builder().kubelet(None)).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let mut p: Pod = serde_json::from_value(common::pod_json("early")).unwrap();
    p.spec.as_mut().unwrap().resource_claims = Some(vec![
        serde_json::from_value(json!({"name": "nic", "resourceClaimTemplateName": "later"})).unwrap(),
    ]);
    pods.create(&PostParams::default(), &p).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        pods.get("early")
            .await
            .unwrap()
            .status
            .unwrap()
            .resource_claim_statuses
            .is_none()
    );
    let templates: Api<ResourceClaimTemplate> = Api::default_namespaced(client.clone());
    templates
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "later"},
                "spec": {"spec": {"devices": {"requests": [{"name": "nic", "exactly": {"deviceClassName": "nic.example.com"}}]}}},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let name = eventually(Duration::from_secs(5), || async {
        pods.get("early")
            .await
            .ok()?
            .status?
            .resource_claim_statuses?
            .first()?
            .resource_claim_name
            .clone()
    })
    .await;
    assert!(name.is_some_and(|n| n.starts_with("early-nic-")));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recorder_events_are_stored_and_mirrored_to_core_events() {
    use k8s_openapi::api::core::v1::{Event as CoreEvent, ObjectReference};
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let (server, client) = start_with(ApiServer::builder().kubelet(None)).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let p = pods
        .create(&PostParams::default(), &pod_with_cpu("p", "1"))
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "unisched".into(),
            instance: Some("test".into()),
        },
    );
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: p.metadata.name.clone(),
        namespace: p.metadata.namespace.clone(),
        uid: p.metadata.uid.clone(),
        ..Default::default()
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: "FailedScheduling".into(),
        note: Some("0/1 nodes are available: 1 Insufficient cpu.".into()),
        action: "Scheduling".into(),
        secondary: None,
    };
    recorder.publish(&ev, &reference).await.unwrap();
    // A repeat becomes a series patch.
    recorder.publish(&ev, &reference).await.unwrap();
    let core: Api<CoreEvent> = Api::default_namespaced(client.clone());
    let mirrored = eventually(Duration::from_secs(5), || async {
        let list = core.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("FailedScheduling") && e.series.is_some())
    })
    .await
    .expect("the events.k8s.io Event shows up as a core Event");
    assert_eq!(mirrored.involved_object.name.as_deref(), Some("p"));
    assert_eq!(
        mirrored.message.as_deref(),
        Some("0/1 nodes are available: 1 Insufficient cpu.")
    );
    assert_eq!(mirrored.reporting_component.as_deref(), Some("unisched"));
    server.shutdown().await;
}
