//! `fieldValidation` modes and admission errors over HTTP, as kube-apiserver answers them.
#![allow(clippy::unwrap_used, clippy::expect_used)] // Tests: a failure is a panic.

mod common;

use common::http;
use serde_json::{Value, json};

fn typo_pod(name: &str) -> String {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
           "spec": {"containers": [{"name": "c", "image": "x", "resource": {"requests": {"cpu": "1"}}}]}})
    .to_string()
}

#[tokio::test]
async fn field_validation_modes_on_create_update_and_patch() {
    let (server, _client) = common::start().await;
    let addr = server.addr;
    let pods = "/api/v1/namespaces/default/pods";
    let j = "application/json";

    let (code, _, status) = http(
        addr,
        "POST",
        &format!("{pods}?fieldValidation=Strict"),
        j,
        &typo_pod("s"),
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert_eq!(status["reason"], "BadRequest");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("strict decoding error: unknown field \"spec.containers[0].resource\""),
        "{status}"
    );

    let (code, warnings, _) = http(addr, "POST", pods, j, &typo_pod("w")).await;
    assert_eq!(code, 201);
    assert_eq!(
        warnings,
        ["299 - \"unknown field \\\"spec.containers[0].resource\\\"\""]
    );

    let (code, warnings, _) = http(
        addr,
        "POST",
        &format!("{pods}?fieldValidation=Ignore"),
        j,
        &typo_pod("i"),
    )
    .await;
    assert_eq!(code, 201);
    assert!(warnings.is_empty(), "{warnings:?}");

    let (code, _, status) = http(
        addr,
        "POST",
        &format!("{pods}?fieldValidation=Loose"),
        j,
        &typo_pod("l"),
    )
    .await;
    assert_eq!(code, 400);
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("Unsupported value: \"Loose\""),
        "{status}"
    );

    // A patch is judged by the unknown fields it adds, not by those already stored.
    let merge = "application/merge-patch+json";
    let (code, warnings, _) = http(
        addr,
        "PATCH",
        &format!("{pods}/w?fieldValidation=Warn"),
        merge,
        r#"{"metadata":{"labels":{"a":"b"}}}"#,
    )
    .await;
    assert_eq!(code, 200);
    assert!(warnings.is_empty(), "{warnings:?}");
    let (code, _, status) = http(
        addr,
        "PATCH",
        &format!("{pods}/w?fieldValidation=Strict"),
        merge,
        r#"{"metadata":{"bogus":1}}"#,
    )
    .await;
    assert_eq!(code, 400, "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("unknown field \"metadata.bogus\""),
        "{status}"
    );
    let stored = server.store().get("pods", Some("default"), "w").unwrap();
    assert!(
        stored.value().get("metadata").unwrap().get("bogus").is_none(),
        "strict patch must not be stored"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn dra_admission_answers_422_with_every_cause() {
    let (server, _client) = common::start().await;
    let claim = json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
    "spec": {"devices": {"requests": [
        {"name": "g", "exactly": {"deviceClassName": "gpu", "allocationMode": "All", "count": 1}},
        {"name": "g", "exactly": {"deviceClassName": "gpu", "selectors": [{"cel": {"expression": "device.driver =="}}]}},
    ]}}});
    let (code, _, status) = http(
        server.addr,
        "POST",
        "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims",
        "application/json",
        &claim.to_string(),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["reason"], "Invalid");
    let fields: Vec<(&str, &str)> = status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["field"].as_str().unwrap(), c["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        fields,
        // kube-apiserver 1.37.2's order: its hand-written checks, then the declarative
        // duplicate check at the request.
        [
            ("spec.devices.requests[0].exactly.count", "FieldValueInvalid"),
            (
                "spec.devices.requests[1].exactly.selectors[0].cel.expression",
                "FieldValueInvalid"
            ),
            ("spec.devices.requests[1]", "FieldValueDuplicate"),
        ]
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("ResourceClaim.resource.k8s.io \"c\" is invalid: ["),
        "{status}"
    );
    server.shutdown().await;
}

/// CSIDrivers get kube-apiserver's defaults; CSIStorageCapacities are listed in their namespace,
/// refuse a negative capacity, and keep their class and topology.
#[tokio::test]
async fn csi_drivers_are_defaulted_and_storage_capacities_checked() {
    let (server, _client) = common::start().await;
    let j = "application/json";
    let drivers = "/apis/storage.k8s.io/v1/csidrivers";
    let driver = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
                        "metadata": {"name": "csi.example.com"}, "spec": {"storageCapacity": true}});
    let (code, _, created) = http(server.addr, "POST", drivers, j, &driver.to_string()).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        created["spec"],
        json!({"attachRequired": true, "podInfoOnMount": false, "storageCapacity": true,
               "fsGroupPolicy": "ReadWriteOnceWithFSType", "requiresRepublish": false,
               "seLinuxMount": false, "preventPodSchedulingIfMissing": false,
               "volumeLifecycleModes": ["Persistent"]})
    );
    let (code, _, got) = http(server.addr, "GET", &format!("{drivers}/csi.example.com"), j, "").await;
    assert_eq!((code, &got["spec"]["storageCapacity"]), (200, &json!(true)));

    let capacities = "/apis/storage.k8s.io/v1/namespaces/default/csistoragecapacities";
    let capacity = |name: &str, class: &str, size: &str| {
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
               "metadata": {"name": name, "namespace": "default"}, "storageClassName": class,
               "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": "n1"}}, "capacity": size})
        .to_string()
    };
    let (code, _, status) = http(
        server.addr,
        "POST",
        capacities,
        j,
        &capacity("bad", "fast", "-1Gi"),
    )
    .await;
    assert_eq!(code, 422, "{status}");
    assert_eq!(status["details"]["causes"][0]["field"], "capacity");
    let (code, _, status) = http(
        server.addr,
        "POST",
        capacities,
        j,
        &capacity("ok", "fast", "10Gi"),
    )
    .await;
    assert_eq!(code, 201, "{status}");
    let (code, _, list) = http(server.addr, "GET", capacities, j, "").await;
    assert_eq!((code, list["items"].as_array().map(Vec::len)), (200, Some(1)));
    let (code, _, status) = http(
        server.addr,
        "PUT",
        &format!("{capacities}/ok"),
        j,
        &capacity("ok", "slow", "20Gi"),
    )
    .await;
    assert_eq!(code, 422, "the class cannot change: {status}");
    let (code, _, updated) = http(
        server.addr,
        "PUT",
        &format!("{capacities}/ok"),
        j,
        &capacity("ok", "fast", "20Gi"),
    )
    .await;
    assert_eq!((code, &updated["capacity"]), (200, &json!("20Gi")), "{updated}");
    let (code, _, _) = http(server.addr, "DELETE", &format!("{capacities}/ok"), j, "").await;
    assert_eq!(code, 200);
    server.shutdown().await;
}

/// batch/v1 Jobs over HTTP: the 422 names every problem in kube-apiserver's words; a good Job gets
/// its defaults and generated selector; a delete without a propagation policy orphans the pods
/// with upstream's warning, and the Job controller lets them go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_are_defaulted_checked_and_orphan_their_pods_by_default() {
    let builder = unisched_sim::ApiServer::builder()
        .controllers(false)
        .garbage_collector(true)
        .job_controller(Some(Default::default()));
    let (server, _client) = common::start_with(builder).await;
    let addr = server.addr;
    let jobs = "/apis/batch/v1/namespaces/default/jobs";
    let j = "application/json";
    let job = |name: &str, parallelism: i64, restart: &str| {
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
               "spec": {"parallelism": parallelism,
                        "scheduling": {"schedulingPolicy": {"gang": {"minCount": 2}}},
                        "template": {"spec": {"restartPolicy": restart,
                                               "containers": [{"name": "c", "image": "x"}]}}}})
        .to_string()
    };
    let (code, _, status) = http(addr, "POST", jobs, j, &job("bad", -1, "Always")).await;
    assert_eq!(code, 422, "{status}");
    let causes: Vec<String> = status["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}: {}",
                c["field"].as_str().unwrap(),
                c["message"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        causes,
        [
            "spec.parallelism: Invalid value: -1: must be greater than or equal to 0",
            "spec.scheduling.schedulingPolicy.gang.minCount: Invalid value: 2: must not be greater than parallelism (-1)",
            "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\"",
        ],
        "{status}"
    );
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("Job.batch \"bad\" is invalid: ["),
        "{status}"
    );

    let (code, _, created) = http(addr, "POST", jobs, j, &job("good", 2, "Never")).await;
    assert_eq!(code, 201, "{created}");
    let uid = created["metadata"]["uid"].as_str().unwrap();
    assert_eq!(
        created["spec"]["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
    );
    assert_eq!(
        created["spec"]["template"]["metadata"]["labels"]["job-name"],
        "good"
    );
    assert_eq!(created["spec"]["backoffLimit"], 6);
    assert_eq!(created["metadata"]["generation"], 1);
    let store = server.store().clone();
    let pods = move || {
        store
            .list_all("pods", Some("default"))
            .unwrap()
            .iter()
            .map(|p| p.to_value())
            .filter(|p| p["metadata"]["labels"]["job-name"] == "good")
            .collect::<Vec<Value>>()
    };
    let start = std::time::Instant::now();
    while pods().len() < 2 && start.elapsed() < std::time::Duration::from_secs(10) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(pods().len(), 2);

    let (code, warnings, _) = http(addr, "DELETE", &format!("{jobs}/good"), j, "").await;
    assert!(code == 200 || code == 202, "{code}");
    assert_eq!(
        warnings,
        [
            "299 - \"child pods are preserved by default when jobs are deleted; set propagationPolicy=Background to remove them or set propagationPolicy=Orphan to suppress this warning\""
        ]
    );
    let start = std::time::Instant::now();
    let released = |p: &Value| {
        p["metadata"].get("ownerReferences").is_none() && p["metadata"].get("finalizers").is_none()
    };
    while !pods().iter().all(released) && start.elapsed() < std::time::Duration::from_secs(10) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let left = pods();
    assert_eq!(left.len(), 2, "orphaned, not deleted");
    assert!(left.iter().all(released), "{left:#?}");
    server.shutdown().await;
}
