//! ResourceSlices are kept without their devices' attribute and capacity maps (the maps live
//! once, compactly, beside the slice: `unisched_dra::device_maps`). The queueing hint for slice
//! updates still has to tell a change in those maps from an update that changes nothing in the
//! spec: a pod waiting for a device attribute is moved by the first and not by the second, also
//! when the change takes the maps away altogether.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::{incoming_by_event, start_scheduler, wait_until};
use unisched_sim::{Patch, Store};

/// Well below the five minutes after which the unschedulable-pods flush would move the pod.
const MOVED_WITHIN: Duration = Duration::from_secs(15);

fn create(store: &Store, resource: &str, ns: Option<&str>, obj: Value) {
    store.create(resource, ns, obj).unwrap();
}

fn pod_field(store: &Store, name: &str, pointer: &str) -> Option<Value> {
    let pod = store.get("pods", Some("default"), name).ok()?;
    pod.value().pointer(pointer).cloned()
}

fn unschedulable(store: &Store, name: &str) -> bool {
    pod_field(store, name, "/status/conditions")
        .and_then(|c| c.as_array().cloned())
        .unwrap_or_default()
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "Unschedulable")
}

/// One waiting pod, one slice update that changes only the device's maps.
struct Case {
    name: &'static str,
    /// What the class asks of the device, besides its driver.
    selector: &'static str,
    /// A JSON patch on the slice.
    change: Value,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "an attribute's value changes",
            selector: "device.attributes['gpu.example.com'].model == 'b'",
            change: json!([{"op": "replace", "path": "/spec/devices/0/attributes/model/string", "value": "b"}]),
        },
        Case {
            // The device is left without maps: stripped, the old and new slices look alike.
            name: "the attributes and capacities go",
            selector: "!has(device.attributes['gpu.example.com'].model)",
            change: json!([{"op": "remove", "path": "/spec/devices/0/attributes"},
                           {"op": "remove", "path": "/spec/devices/0/capacity"}]),
        },
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_in_device_maps_alone_moves_the_waiting_pod() {
    for case in cases() {
        run_case(&case).await;
    }
}

async fn run_case(case: &Case) {
    let server = support::serve().await;
    let store = server.store().clone();
    let expression = format!("device.driver == 'gpu.example.com' && {}", case.selector);
    create(
        &store,
        "deviceclasses",
        None,
        json!({"metadata": {"name": "gpu"},
               "spec": {"selectors": [{"cel": {"expression": expression}}]}}),
    );
    create(
        &store,
        "nodes",
        None,
        json!({"metadata": {"name": "n0"},
               "status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"}}}),
    );
    create(
        &store,
        "resourceslices",
        None,
        json!({"metadata": {"name": "n0-gpu"},
               "spec": {"driver": "gpu.example.com", "nodeName": "n0",
                        "pool": {"name": "n0", "generation": 1, "resourceSliceCount": 1},
                        "devices": [{"name": "gpu-0",
                                     "attributes": {"model": {"string": "a"}},
                                     "capacity": {"memory": {"value": "40Gi"}}}]}}),
    );
    create(
        &store,
        "resourceclaims",
        Some("default"),
        json!({"metadata": {"name": "c", "namespace": "default"},
               "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}}),
    );
    create(
        &store,
        "pods",
        Some("default"),
        json!({"metadata": {"name": "p", "namespace": "default"},
               "spec": {"schedulerName": "unisched",
                        "resourceClaims": [{"name": "dev", "resourceClaimName": "c"}],
                        "containers": [{"name": "c", "image": "x", "resources": {"claims": [{"name": "dev"}]}}]}}),
    );

    let (sched, task) = start_scheduler(&server, "slice-maps", 3).await;
    let what = |w: &str| format!("{}: {w}", case.name);
    wait_until(&what("the pod is unschedulable"), MOVED_WITHIN, || {
        unschedulable(&store, "p")
    })
    .await;

    // An update that leaves the spec as it was (a label): the hint skips it.
    store
        .patch(
            "resourceslices",
            None,
            "n0-gpu",
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .unwrap();
    // The device's maps alone change (same generation, same everything else).
    store
        .patch(
            "resourceslices",
            None,
            "n0-gpu",
            &Patch::Json(case.change.clone()),
        )
        .unwrap();
    wait_until(&what("the pod is bound"), MOVED_WITHIN, || {
        pod_field(&store, "p", "/spec/nodeName").is_some_and(|n| n == "n0")
    })
    .await;
    // Both updates were seen (one watch, in order) before the second bound the pod; only the
    // second moved it.
    let moved = incoming_by_event(&sched);
    assert_eq!(
        moved.get("resource.k8s.io/ResourceSliceUpdate"),
        Some(&1),
        "{}: {moved:?}",
        case.name
    );

    sched.stop();
    let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
}
