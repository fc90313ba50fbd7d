//! Table tests for in-place pod resize accounting: the spec, allocated and actuated sums and the
//! infeasible-resize rule, at container and pod level, with sidecars and node-allocatable claims.
//! The cases are upstream's (component-helpers `resource` tests with status resources), written as
//! ours; amounts are in scheduler units.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use unisched_resource::{
    PodRequestOptions, Resource, is_pod_resize_deferred, is_pod_resize_infeasible, pod_limits, pod_requests,
    pod_resources,
};

const GI: i64 = 1024 * 1024 * 1024;

/// A container with the given requests and limits (`null` for none).
fn c(name: &str, requests: Value, limits: Value) -> Value {
    let mut resources = json!({});
    if !requests.is_null() {
        resources["requests"] = requests;
    }
    if !limits.is_null() {
        resources["limits"] = limits;
    }
    json!({"name": name, "resources": resources})
}

fn sidecar(name: &str, requests: Value, limits: Value) -> Value {
    let mut container = c(name, requests, limits);
    container["restartPolicy"] = json!("Always");
    container
}

/// A container status: `allocatedResources` and `resources` (`null` for absent).
fn cs(name: &str, allocated: Value, resources: Value) -> Value {
    let mut status = json!({"name": name, "image": "", "imageID": "", "ready": true, "restartCount": 0});
    if !allocated.is_null() {
        status["allocatedResources"] = allocated;
    }
    if !resources.is_null() {
        status["resources"] = resources;
    }
    status
}

fn infeasible() -> Value {
    json!([{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}])
}

fn pod(spec: Value, status: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec, "status": status})).unwrap()
}

fn res(pairs: &[(&str, i64)]) -> Resource {
    let mut r = Resource::default();
    for (name, v) in pairs {
        r.set(name, *v);
    }
    r
}

fn status_opts() -> PodRequestOptions {
    PodRequestOptions {
        use_status_resources: true,
        ..PodRequestOptions::default()
    }
}

fn pod_level_opts() -> PodRequestOptions {
    PodRequestOptions {
        pod_level_status_resources: true,
        ..status_opts()
    }
}

fn with_claims(opts: PodRequestOptions) -> PodRequestOptions {
    PodRequestOptions {
        include_node_allocatable_claims: true,
        ..opts
    }
}

struct Case {
    name: &'static str,
    pod: Pod,
    opts: PodRequestOptions,
    /// Expected requests, when the case checks them.
    requests: Option<Resource>,
    /// Expected limits, when the case checks them.
    limits: Option<Resource>,
}

fn run(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for case in cases {
        if let Some(want) = &case.requests {
            let got = pod_requests(&case.pod, &case.opts);
            if got != *want {
                failures.push(format!("{} (requests): got {got:?}, want {want:?}", case.name));
            }
        }
        if let Some(want) = &case.limits {
            let got = pod_limits(&case.pod, &case.opts);
            if got != *want {
                failures.push(format!("{} (limits): got {got:?}, want {want:?}", case.name));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn requests_case(name: &'static str, pod: Pod, opts: PodRequestOptions, want: Resource) -> Case {
    Case {
        name,
        pod,
        opts,
        requests: Some(want),
        limits: None,
    }
}

fn limits_case(name: &'static str, pod: Pod, opts: PodRequestOptions, want: Resource) -> Case {
    Case {
        name,
        pod,
        opts,
        requests: None,
        limits: Some(want),
    }
}

#[test]
fn container_requests_with_status() {
    let cpu = |v: i64| res(&[("cpu", v)]);
    let one_container = |spec_cpu: &str, status: Value, conditions: Value| {
        let mut s = json!({"containerStatuses": [status]});
        if !conditions.is_null() {
            s["conditions"] = conditions;
        }
        pod(
            json!({"containers": [c("container-1", json!({"cpu": spec_cpu}), Value::Null)]}),
            s,
        )
    };
    let actuated_2 = || cs("container-1", Value::Null, json!({"requests": {"cpu": "2"}}));
    let sidecar_pod = |conditions: Value| {
        let mut s = json!({"initContainerStatuses": [
            cs("restartable-init-1", Value::Null, json!({"requests": {"cpu": "2"}}))
        ]});
        if !conditions.is_null() {
            s["conditions"] = conditions;
        }
        pod(
            json!({
                "initContainers": [sidecar("restartable-init-1", json!({"cpu": "4"}), Value::Null)],
                "containers": [],
            }),
            s,
        )
    };
    run(vec![
        requests_case(
            "resized, infeasible: only the status counts",
            one_container("4", actuated_2(), infeasible()),
            status_opts(),
            cpu(2000),
        ),
        requests_case(
            "resized, infeasible and in progress: the larger of allocated and actuated",
            one_container(
                "6",
                cs(
                    "container-1",
                    json!({"cpu": "4"}),
                    json!({"requests": {"cpu": "2"}}),
                ),
                infeasible(),
            ),
            status_opts(),
            cpu(4000),
        ),
        requests_case(
            "resized, no resize condition: the larger spec counts",
            one_container("4", actuated_2(), Value::Null),
            status_opts(),
            cpu(4000),
        ),
        requests_case(
            "resized, infeasible, status not used",
            one_container("4", actuated_2(), infeasible()),
            PodRequestOptions::default(),
            cpu(4000),
        ),
        requests_case(
            "per-resource three-way maximum",
            pod(
                json!({"containers": [c(
                    "container-1",
                    json!({"cpu": "30m", "memory": "20M", "ephemeral-storage": "10G"}),
                    Value::Null,
                )]}),
                json!({"containerStatuses": [cs(
                    "container-1",
                    json!({"cpu": "20m", "memory": "10M", "ephemeral-storage": "30G"}),
                    json!({"requests": {"cpu": "10m", "memory": "30M", "ephemeral-storage": "20G"}}),
                )]}),
            ),
            status_opts(),
            res(&[
                ("cpu", 30),
                ("memory", 30_000_000),
                ("ephemeral-storage", 30_000_000_000),
            ]),
        ),
        requests_case(
            "resized sidecar, infeasible",
            sidecar_pod(infeasible()),
            status_opts(),
            cpu(2000),
        ),
        requests_case(
            "resized sidecar, no resize condition",
            sidecar_pod(Value::Null),
            status_opts(),
            cpu(4000),
        ),
        requests_case(
            "resized sidecar, infeasible, status not used",
            sidecar_pod(infeasible()),
            PodRequestOptions::default(),
            cpu(4000),
        ),
        requests_case(
            "the maximum is of the sums, not the sum of per-container maxima",
            pod(
                json!({"containers": [
                    c("c1", json!({"cpu": "1"}), Value::Null),
                    c("c2", json!({"cpu": "2"}), Value::Null),
                ]}),
                json!({"containerStatuses": [
                    cs("c1", json!({"cpu": "2"}), Value::Null),
                    cs("c2", json!({"cpu": "1"}), Value::Null),
                ]}),
            ),
            status_opts(),
            cpu(3000),
        ),
        requests_case(
            "a container without requests counts its actuated status",
            pod(
                json!({"containers": [c("container-1", Value::Null, Value::Null)]}),
                json!({"containerStatuses": [cs("container-1", Value::Null, json!({"requests": {"cpu": "2"}}))]}),
            ),
            status_opts(),
            cpu(2000),
        ),
        requests_case(
            "a sidecar without requests counts its actuated status",
            pod(
                json!({"initContainers": [sidecar("container-1", Value::Null, Value::Null)], "containers": []}),
                json!({"initContainerStatuses": [cs("container-1", Value::Null, json!({"requests": {"cpu": "2"}}))]}),
            ),
            status_opts(),
            cpu(2000),
        ),
    ]);
}

#[test]
fn container_limits_with_status() {
    let mem = |gi: i64| res(&[("memory", gi * GI)]);
    let regular = |spec: &str, actuated: &str| {
        pod(
            json!({"containers": [c("container-1", Value::Null, json!({"memory": spec}))]}),
            json!({"containerStatuses": [cs("container-1", Value::Null, json!({"limits": {"memory": actuated}}))]}),
        )
    };
    let with_sidecar = |spec: &str, actuated: &str| {
        pod(
            json!({
                "initContainers": [sidecar("restartable-init-1", Value::Null, json!({"memory": spec}))],
                "containers": [],
            }),
            json!({"initContainerStatuses": [
                cs("restartable-init-1", Value::Null, json!({"limits": {"memory": actuated}}))
            ]}),
        )
    };
    run(vec![
        limits_case("scaled up", regular("2Gi", "1Gi"), status_opts(), mem(2)),
        limits_case("scaled down", regular("1Gi", "2Gi"), status_opts(), mem(2)),
        limits_case(
            "scaled down, status not used",
            regular("1Gi", "2Gi"),
            PodRequestOptions::default(),
            mem(1),
        ),
        limits_case(
            "sidecar scaled up",
            with_sidecar("2Gi", "1Gi"),
            status_opts(),
            mem(2),
        ),
        limits_case(
            "sidecar scaled down",
            with_sidecar("1Gi", "2Gi"),
            status_opts(),
            mem(2),
        ),
        limits_case(
            "sidecar scaled down, status not used",
            with_sidecar("1Gi", "2Gi"),
            PodRequestOptions::default(),
            mem(1),
        ),
        limits_case(
            "the maximum is of the sums, not the sum of per-container maxima",
            pod(
                json!({"containers": [
                    c("c1", Value::Null, json!({"cpu": "1"})),
                    c("c2", Value::Null, json!({"cpu": "2"})),
                ]}),
                json!({"containerStatuses": [
                    cs("c1", Value::Null, json!({"limits": {"cpu": "2"}})),
                    cs("c2", Value::Null, json!({"limits": {"cpu": "1"}})),
                ]}),
            ),
            status_opts(),
            res(&[("cpu", 3000)]),
        ),
        Case {
            name: "infeasible resize: only the actuated limits count",
            pod: pod(
                json!({"containers": [c("c1", Value::Null, json!({"cpu": "10"}))]}),
                json!({
                    "conditions": infeasible(),
                    "containerStatuses": [cs("c1", Value::Null, json!({"limits": {"cpu": "6"}}))],
                }),
            ),
            opts: status_opts(),
            requests: Some(Resource::default()),
            limits: Some(res(&[("cpu", 6000)])),
        },
    ]);
}

#[test]
fn pod_level_status() {
    let cpu = |v: i64| res(&[("cpu", v)]);
    let c1 = || c("c1", json!({"cpu": "1"}), json!({"cpu": "2"}));
    run(vec![
        Case {
            name: "the pod-level status replaces the container status sums",
            pod: pod(
                json!({"containers": [c1()]}),
                json!({
                    "allocatedResources": {"cpu": "4"},
                    "resources": {"requests": {"cpu": "3"}, "limits": {"cpu": "5"}},
                }),
            ),
            opts: pod_level_opts(),
            requests: Some(cpu(4000)),
            limits: Some(cpu(5000)),
        },
        Case {
            name: "no pod-level allocatedResources: the container statuses count",
            pod: pod(
                json!({"containers": [c1()]}),
                json!({
                    "containerStatuses": [cs(
                        "c1",
                        json!({"cpu": "6"}),
                        json!({"requests": {"cpu": "5"}, "limits": {"cpu": "7"}}),
                    )],
                    "resources": {"requests": {"cpu": "3"}, "limits": {"cpu": "7"}},
                }),
            ),
            opts: pod_level_opts(),
            requests: Some(cpu(6000)),
            limits: Some(cpu(7000)),
        },
        Case {
            name: "no pod-level resources: the container statuses count",
            pod: pod(
                json!({"containers": [c1()]}),
                json!({
                    "containerStatuses": [cs(
                        "c1",
                        json!({"cpu": "6"}),
                        json!({"requests": {"cpu": "5"}, "limits": {"cpu": "8"}}),
                    )],
                    "allocatedResources": {"cpu": "6"},
                }),
            ),
            opts: pod_level_opts(),
            requests: Some(cpu(6000)),
            limits: Some(cpu(8000)),
        },
        Case {
            name: "pod-level spec against pod-level status",
            pod: pod(
                json!({
                    "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "4"}},
                    "containers": [c1()],
                }),
                json!({
                    "allocatedResources": {"cpu": "3"},
                    "resources": {"requests": {"cpu": "3.5"}, "limits": {"cpu": "5"}},
                }),
            ),
            opts: pod_level_opts(),
            requests: Some(cpu(3500)),
            limits: Some(cpu(5000)),
        },
        Case {
            name: "pod-level spec of an infeasible resize does not count",
            pod: pod(
                json!({
                    "resources": {"requests": {"cpu": "10"}, "limits": {"cpu": "20"}},
                    "containers": [c1()],
                }),
                json!({
                    "conditions": infeasible(),
                    "allocatedResources": {"cpu": "3"},
                    "resources": {"requests": {"cpu": "4"}, "limits": {"cpu": "8"}},
                }),
            ),
            opts: pod_level_opts(),
            requests: Some(cpu(4000)),
            limits: Some(cpu(8000)),
        },
        Case {
            name: "pod-level status is ignored without the pod-level option",
            pod: pod(
                json!({
                    "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "4"}},
                    "containers": [c1()],
                }),
                json!({
                    "allocatedResources": {"cpu": "3"},
                    "resources": {"requests": {"cpu": "3.5"}, "limits": {"cpu": "5"}},
                }),
            ),
            opts: status_opts(),
            requests: Some(cpu(2000)),
            limits: Some(cpu(4000)),
        },
    ]);
}

fn claim(name: &str, mapping: Value, overhead: Value) -> Value {
    json!({"resourceClaimName": name, "containers": ["c1", "c2"], "mapping": mapping, "overhead": overhead})
}

fn mem_claim() -> Value {
    claim(
        "shared-mem-claim",
        json!([]),
        json!([{"name": "memory", "perContainer": "1Gi"}]),
    )
}

fn cpu_claim() -> Value {
    claim(
        "shared-cpu-claim",
        json!([{"name": "cpu", "quantity": "1"}]),
        json!([]),
    )
}

#[test]
fn node_allocatable_claims_with_status() {
    let mem = |gi: i64| res(&[("memory", gi * GI)]);
    let both_opts = || with_claims(pod_level_opts());
    let container_opts = || with_claims(status_opts());
    let two = |c1: Value, c2: Value| json!({"containers": [c1, c2]});
    run(vec![
        requests_case(
            "memory resized down: the pod-level actuated status holds the old amount",
            pod(
                two(
                    c("c1", json!({"memory": "1Gi"}), Value::Null),
                    c("c2", json!({"memory": "2Gi"}), Value::Null),
                ),
                json!({
                    "containerStatuses": [
                        cs("c1", json!({"memory": "1Gi"}), json!({"requests": {"memory": "2Gi"}})),
                        cs("c2", json!({"memory": "2Gi"}), json!({"requests": {"memory": "2Gi"}})),
                    ],
                    "resources": {"requests": {"memory": "6Gi"}},
                    "allocatedResources": {"memory": "5Gi"},
                    "nodeAllocatableResourceClaimStatuses": [mem_claim()],
                }),
            ),
            both_opts(),
            mem(6),
        ),
        requests_case(
            "pod-level cpu with claims, no resize",
            pod(
                json!({
                    "resources": {"requests": {"cpu": "3"}},
                    "containers": [
                        c("c1", json!({"memory": "1Gi"}), Value::Null),
                        c("c2", json!({"memory": "2Gi"}), Value::Null),
                    ],
                }),
                json!({
                    "containerStatuses": [
                        cs("c1", json!({"memory": "1Gi"}), json!({"requests": {"memory": "1Gi"}})),
                        cs("c2", json!({"memory": "2Gi"}), json!({"requests": {"memory": "2Gi"}})),
                    ],
                    "resources": {"requests": {"cpu": "3", "memory": "5Gi"}},
                    "allocatedResources": {"cpu": "3", "memory": "5Gi"},
                    "nodeAllocatableResourceClaimStatuses": [cpu_claim(), mem_claim()],
                }),
            ),
            both_opts(),
            res(&[("cpu", 3000), ("memory", 5 * GI)]),
        ),
        requests_case(
            "pod-level cpu resized up with claims",
            pod(
                json!({
                    "resources": {"requests": {"cpu": "4"}},
                    "containers": [
                        c("c1", json!({"memory": "1Gi"}), Value::Null),
                        c("c2", json!({"memory": "2Gi"}), Value::Null),
                    ],
                }),
                json!({
                    "containerStatuses": [
                        cs("c1", json!({"memory": "1Gi"}), json!({"requests": {"memory": "1Gi"}})),
                        cs("c2", json!({"memory": "2Gi"}), json!({"requests": {"memory": "2Gi"}})),
                    ],
                    "resources": {"requests": {"cpu": "3", "memory": "5Gi"}},
                    "allocatedResources": {"cpu": "3", "memory": "5Gi"},
                    "nodeAllocatableResourceClaimStatuses": [cpu_claim(), mem_claim()],
                }),
            ),
            both_opts(),
            res(&[("cpu", 4000), ("memory", 5 * GI)]),
        ),
        limits_case(
            "pod-level cpu limits with claims, no resize",
            pod(
                json!({
                    "resources": {"limits": {"cpu": "3"}},
                    "containers": [
                        c("c1", Value::Null, json!({"memory": "1Gi"})),
                        c("c2", Value::Null, json!({"memory": "2Gi"})),
                    ],
                }),
                json!({
                    "containerStatuses": [
                        cs("c1", Value::Null, json!({"limits": {"memory": "1Gi"}})),
                        cs("c2", Value::Null, json!({"limits": {"memory": "2Gi"}})),
                    ],
                    "resources": {"limits": {"cpu": "3", "memory": "5Gi"}},
                    "nodeAllocatableResourceClaimStatuses": [cpu_claim(), mem_claim()],
                }),
            ),
            both_opts(),
            res(&[("cpu", 3000), ("memory", 5 * GI)]),
        ),
        limits_case(
            "pod-level cpu limits resized up with claims",
            pod(
                json!({
                    "resources": {"limits": {"cpu": "4"}},
                    "containers": [
                        c("c1", Value::Null, json!({"memory": "1Gi"})),
                        c("c2", Value::Null, json!({"memory": "2Gi"})),
                    ],
                }),
                json!({
                    "containerStatuses": [
                        cs("c1", Value::Null, json!({"limits": {"memory": "1Gi"}})),
                        cs("c2", Value::Null, json!({"limits": {"memory": "2Gi"}})),
                    ],
                    "resources": {"limits": {"cpu": "3", "memory": "5Gi"}},
                    "nodeAllocatableResourceClaimStatuses": [cpu_claim(), mem_claim()],
                }),
            ),
            both_opts(),
            res(&[("cpu", 4000), ("memory", 5 * GI)]),
        ),
        limits_case(
            "container memory limit resized up with a claim",
            pod(
                two(
                    c("c1", Value::Null, json!({"memory": "4Gi"})),
                    c("c2", Value::Null, json!({"memory": "2Gi"})),
                ),
                json!({
                    "containerStatuses": [
                        cs("c1", Value::Null, json!({"limits": {"memory": "2Gi"}})),
                        cs("c2", Value::Null, json!({"limits": {"memory": "2Gi"}})),
                    ],
                    "nodeAllocatableResourceClaimStatuses": [mem_claim()],
                }),
            ),
            container_opts(),
            mem(8),
        ),
        requests_case(
            "container memory request resized up with a claim",
            pod(
                two(
                    c("c1", json!({"memory": "4Gi"}), Value::Null),
                    c("c2", json!({"memory": "2Gi"}), Value::Null),
                ),
                json!({
                    "containerStatuses": [
                        cs("c1", json!({"memory": "4Gi"}), json!({"requests": {"memory": "2Gi"}})),
                        cs("c2", json!({"memory": "2Gi"}), json!({"requests": {"memory": "2Gi"}})),
                    ],
                    "nodeAllocatableResourceClaimStatuses": [mem_claim()],
                }),
            ),
            container_opts(),
            mem(8),
        ),
        requests_case(
            "an allocated container status still carries the claim on top",
            pod(
                two(
                    c("c1", json!({"memory": "1Gi"}), Value::Null),
                    c("c2", json!({"memory": "1Gi"}), Value::Null),
                ),
                json!({
                    "containerStatuses": [
                        cs("c1", json!({"memory": "3Gi"}), Value::Null),
                        cs("c2", json!({"memory": "1Gi"}), Value::Null),
                    ],
                    "nodeAllocatableResourceClaimStatuses": [mem_claim()],
                }),
            ),
            container_opts(),
            // allocated 3 + 1 and 2 × 1Gi of claim overhead; the spec sum is 2 + 2.
            mem(6),
        ),
    ]);
}

#[test]
fn resize_conditions() {
    let with_reason = |reason: &str| {
        pod(
            json!({"containers": []}),
            json!({"conditions": [{"type": "PodResizePending", "status": "True", "reason": reason}]}),
        )
    };
    assert!(is_pod_resize_deferred(&with_reason("Deferred")));
    assert!(!is_pod_resize_infeasible(&with_reason("Deferred")));
    assert!(is_pod_resize_infeasible(&with_reason("Infeasible")));
    assert!(!is_pod_resize_deferred(&with_reason("Infeasible")));
    assert!(!is_pod_resize_deferred(&with_reason("Other")));
    assert!(!is_pod_resize_infeasible(&with_reason("Other")));
    assert!(!is_pod_resize_infeasible(&pod(
        json!({"containers": []}),
        json!({})
    )));
}

/// The scheduler's own accounting counts status resources: a bound pod whose status shows a
/// larger allocation than its spec holds the larger amount, for requests and for the non-zero
/// scoring variant.
#[test]
fn pod_resources_counts_the_status() {
    let p = pod(
        json!({"containers": [c("c1", json!({"cpu": "1", "memory": "1Gi"}), Value::Null)]}),
        json!({"containerStatuses": [cs(
            "c1",
            json!({"cpu": "3", "memory": "1Gi"}),
            json!({"requests": {"cpu": "2", "memory": "1Gi"}}),
        )]}),
    );
    let got = pod_resources(&p);
    assert_eq!(got.requests, res(&[("cpu", 3000), ("memory", GI)]));
    assert_eq!(got.non_zero, got.requests);

    // A container without requests whose status reports some: the defaults do not hide them.
    let p = pod(
        json!({"containers": [c("c1", Value::Null, Value::Null)]}),
        json!({"containerStatuses": [cs("c1", json!({"cpu": "2"}), Value::Null)]}),
    );
    let got = pod_resources(&p);
    assert_eq!(got.requests, res(&[("cpu", 2000)]));
    assert_eq!(got.non_zero, res(&[("cpu", 2000), ("memory", 200 * 1024 * 1024)]));

    // Infeasible with no status amounts at all: nothing counts (the spec never will be applied).
    let p = pod(
        json!({"containers": [c("c1", json!({"cpu": "4"}), Value::Null)]}),
        json!({"conditions": infeasible()}),
    );
    assert_eq!(pod_resources(&p).requests, Resource::default());
}
