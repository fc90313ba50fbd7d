//! Table tests for pod request math: containers, init containers, sidecars, overhead, pod-level
//! resources, non-zero defaults and KEP-5517 node-allocatable claim statuses.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use k8s_openapi::api::core::v1::{NodeAllocatableResourceClaimStatus, Pod};
use serde_json::{Value, json};
use unisched_resource::{
    DEFAULT_MEMORY_REQUEST, DEFAULT_MILLI_CPU_REQUEST, InvalidQuantity, PodRequestOptions, Resource,
    node_allocatable_claim_footprint, pod_limits, pod_requests, pod_requests_checked,
    pod_requests_with_claims, pod_resources,
};

const MI: i64 = 1024 * 1024;
const GI: i64 = 1024 * MI;

/// A container with the given requests (and optional limits / restart policy).
fn c(name: &str, requests: Value) -> Value {
    json!({"name": name, "resources": {"requests": requests}})
}

fn c_lim(name: &str, requests: Value, limits: Value) -> Value {
    json!({"name": name, "resources": {"requests": requests, "limits": limits}})
}

fn sidecar(name: &str, requests: Value) -> Value {
    json!({"name": name, "restartPolicy": "Always", "resources": {"requests": requests}})
}

fn bare(name: &str) -> Value {
    json!({"name": name})
}

fn pod(spec: Value) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": spec})).unwrap()
}

fn pod_with_claims(spec: Value, claims: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": spec,
        "status": {"nodeAllocatableResourceClaimStatuses": claims}
    }))
    .unwrap()
}

fn res(cpu_milli: i64, memory: i64) -> Resource {
    Resource {
        milli_cpu: cpu_milli,
        memory,
        ..Resource::default()
    }
}

fn with(mut r: Resource, name: &str, v: i64) -> Resource {
    r.set(name, v);
    r
}

fn claims_opts() -> PodRequestOptions {
    PodRequestOptions {
        include_node_allocatable_claims: true,
        ..PodRequestOptions::default()
    }
}

struct Case {
    name: &'static str,
    pod: Pod,
    opts: PodRequestOptions,
    want: Resource,
}

fn run(cases: Vec<Case>) {
    let mut failures = Vec::new();
    for case in cases {
        let got = pod_requests(&case.pod, &case.opts);
        if got != case.want {
            failures.push(format!("{}: got {got:?}, want {:?}", case.name, case.want));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn container_and_init_container_rules() {
    let d = PodRequestOptions::default;
    run(vec![
        Case {
            name: "regular containers are summed",
            pod: pod(json!({"containers": [
                c("a", json!({"cpu": "100m", "memory": "1Gi"})),
                c("b", json!({"cpu": "200m", "memory": "1Gi"})),
            ]})),
            opts: d(),
            want: res(300, 2 * GI),
        },
        Case {
            name: "sums are exact before converting (0.5 + 0.5 bytes = 1 byte)",
            pod: pod(
                json!({"containers": [c("a", json!({"memory": "0.5"})), c("b", json!({"memory": "0.5"}))]}),
            ),
            opts: d(),
            want: res(0, 1),
        },
        Case {
            name: "cpu rounds up to milli-cores, memory to bytes",
            pod: pod(json!({"containers": [c("a", json!({"cpu": "0.1m", "memory": "1.1"}))]})),
            opts: d(),
            want: res(1, 2),
        },
        Case {
            name: "an init container larger than the containers sets the floor",
            pod: pod(json!({
                "initContainers": [c("i", json!({"cpu": "500m", "memory": "100Mi"}))],
                "containers": [c("a", json!({"cpu": "300m", "memory": "200Mi"}))],
            })),
            opts: d(),
            want: res(500, 200 * MI),
        },
        Case {
            name: "several init containers: the largest one counts, not their sum",
            pod: pod(json!({
                "initContainers": [
                    c("i1", json!({"cpu": "1", "memory": "1Gi"})),
                    c("i2", json!({"cpu": "2", "memory": "512Mi"})),
                    c("i3", json!({"cpu": "500m", "memory": "3Gi"})),
                ],
                "containers": [c("a", json!({"cpu": "1500m", "memory": "1Gi"}))],
            })),
            opts: d(),
            want: res(2000, 3 * GI),
        },
        Case {
            name: "a sidecar adds to the pod total",
            pod: pod(json!({
                "initContainers": [sidecar("s", json!({"cpu": "100m", "memory": "64Mi"}))],
                "containers": [c("a", json!({"cpu": "500m", "memory": "128Mi"}))],
            })),
            opts: d(),
            want: res(600, 192 * MI),
        },
        Case {
            name: "an init container after a sidecar runs alongside it",
            pod: pod(json!({
                "initContainers": [
                    sidecar("s", json!({"cpu": "100m"})),
                    c("i", json!({"cpu": "1"})),
                ],
                "containers": [c("a", json!({"cpu": "500m"}))],
            })),
            opts: d(),
            want: res(1100, 0),
        },
        Case {
            name: "an init container before a sidecar does not see it",
            pod: pod(json!({
                "initContainers": [
                    c("i", json!({"cpu": "1"})),
                    sidecar("s", json!({"cpu": "200m"})),
                ],
                "containers": [c("a", json!({"cpu": "500m"}))],
            })),
            opts: d(),
            want: res(1000, 0),
        },
        Case {
            name: "sidecars accumulate; the init peak includes all earlier sidecars",
            pod: pod(json!({
                "initContainers": [
                    sidecar("s1", json!({"cpu": "300m"})),
                    c("i1", json!({"cpu": "200m"})),
                    sidecar("s2", json!({"cpu": "300m"})),
                    c("i2", json!({"cpu": "1"})),
                ],
                "containers": [c("a", json!({"cpu": "100m"}))],
            })),
            opts: d(),
            // total = 100 + 300 + 300 = 700; i2 use = 1000 + 600 = 1600
            want: res(1600, 0),
        },
        Case {
            name: "restartPolicy other than Always is a classic init container",
            pod: pod(json!({
                "initContainers": [json!({"name": "i", "restartPolicy": "OnFailure", "resources": {"requests": {"cpu": "200m"}}})],
                "containers": [c("a", json!({"cpu": "500m"}))],
            })),
            opts: d(),
            want: res(500, 0),
        },
        Case {
            name: "extended resources, hugepages and ephemeral storage follow the same rules",
            pod: pod(json!({
                "initContainers": [c("i", json!({"example.com/gpu": "3", "ephemeral-storage": "1Gi"}))],
                "containers": [
                    c("a", json!({"example.com/gpu": "1", "hugepages-2Mi": "4Mi", "ephemeral-storage": "100Mi"})),
                    c("b", json!({"example.com/gpu": "1", "hugepages-2Mi": "2Mi"})),
                ],
            })),
            opts: d(),
            want: with(
                with(with(res(0, 0), "example.com/gpu", 3), "hugepages-2Mi", 6 * MI),
                "ephemeral-storage",
                GI,
            ),
        },
        Case {
            name: "overhead is added after the init maximum",
            pod: pod(json!({
                "initContainers": [c("i", json!({"cpu": "1"}))],
                "containers": [c("a", json!({"cpu": "500m", "memory": "1Gi"}))],
                "overhead": {"cpu": "250m", "memory": "120Mi"},
            })),
            opts: d(),
            want: res(1250, GI + 120 * MI),
        },
        Case {
            name: "overhead can be excluded",
            pod: pod(json!({
                "containers": [c("a", json!({"cpu": "500m"}))],
                "overhead": {"cpu": "250m"},
            })),
            opts: PodRequestOptions {
                exclude_overhead: true,
                ..d()
            },
            want: res(500, 0),
        },
        Case {
            name: "a pod without containers or spec requests nothing",
            pod: serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap(),
            opts: d(),
            want: Resource::default(),
        },
    ]);
}

#[test]
fn pod_level_resources() {
    let d = PodRequestOptions::default;
    run(vec![
        Case {
            name: "pod-level requests replace cpu and memory",
            pod: pod(json!({
                "resources": {"requests": {"cpu": "2", "memory": "4Gi"}},
                "containers": [c("a", json!({"cpu": "500m", "memory": "1Gi", "example.com/gpu": "1"}))],
            })),
            opts: d(),
            want: with(res(2000, 4 * GI), "example.com/gpu", 1),
        },
        Case {
            name: "only the pod-level resources that are set are replaced",
            pod: pod(json!({
                "resources": {"requests": {"cpu": "2"}},
                "containers": [c("a", json!({"cpu": "500m", "memory": "1Gi"}))],
            })),
            opts: d(),
            want: res(2000, GI),
        },
        Case {
            name: "pod-level requests are ignored when skipped",
            pod: pod(json!({
                "resources": {"requests": {"cpu": "2"}},
                "containers": [c("a", json!({"cpu": "500m"}))],
            })),
            opts: PodRequestOptions {
                skip_pod_level_resources: true,
                ..d()
            },
            want: res(500, 0),
        },
        Case {
            name: "pod-level requests still get overhead on top",
            pod: pod(json!({
                "resources": {"requests": {"cpu": "2"}},
                "containers": [c("a", json!({"cpu": "500m"}))],
                "overhead": {"cpu": "100m"},
            })),
            opts: d(),
            want: res(2100, 0),
        },
        Case {
            name: "non pod-level resources at pod level are ignored",
            pod: pod(json!({
                "resources": {"requests": {"ephemeral-storage": "10Gi", "example.com/gpu": "4"}},
                "containers": [c("a", json!({"cpu": "500m", "ephemeral-storage": "1Gi"}))],
            })),
            opts: d(),
            want: with(res(500, 0), "ephemeral-storage", GI),
        },
        Case {
            name: "pod-level hugepages requests replace the container sum (upstream IsSupportedPodLevelResource)",
            pod: pod(json!({
                "resources": {"requests": {"hugepages-2Mi": "10Mi"}, "limits": {"hugepages-2Mi": "10Mi"}},
                "containers": [c("a", json!({"hugepages-2Mi": "4Mi"}))],
            })),
            opts: d(),
            want: with(res(0, 0), "hugepages-2Mi", 10 * MI),
        },
        Case {
            name: "pod-level limits alone do not change requests",
            pod: pod(json!({
                "resources": {"limits": {"cpu": "4"}},
                "containers": [c("a", json!({"cpu": "500m"}))],
            })),
            opts: d(),
            want: res(500, 0),
        },
    ]);
}

#[test]
fn non_zero_defaults() {
    let defaults = res(DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST);
    let cases: Vec<(&str, Pod, Resource, Resource)> = vec![
        (
            "a container without requests gets both defaults",
            pod(json!({"containers": [bare("a")]})),
            Resource::default(),
            defaults.clone(),
        ),
        (
            "defaults apply per container",
            pod(json!({"containers": [bare("a"), bare("b")]})),
            Resource::default(),
            res(2 * DEFAULT_MILLI_CPU_REQUEST, 2 * DEFAULT_MEMORY_REQUEST),
        ),
        (
            "only the missing resource is defaulted",
            pod(json!({"containers": [c("a", json!({"cpu": "1"}))]})),
            res(1000, 0),
            res(1000, DEFAULT_MEMORY_REQUEST),
        ),
        (
            "an explicit zero is not missing",
            pod(json!({"containers": [c("a", json!({"cpu": "0", "memory": "0"}))]})),
            Resource::default(),
            Resource::default(),
        ),
        (
            "init containers get defaults too, under the peak rule",
            pod(
                json!({"initContainers": [bare("i")], "containers": [c("a", json!({"cpu": "50m", "memory": "10Mi"}))]}),
            ),
            res(50, 10 * MI),
            res(DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST),
        ),
        (
            "pod-level cpu set: cpu is not defaulted, memory missing everywhere is (per container)",
            pod(json!({"resources": {"requests": {"cpu": "2"}}, "containers": [bare("a"), bare("b")]})),
            res(2000, 0),
            res(2000, 2 * DEFAULT_MEMORY_REQUEST),
        ),
        (
            "pod-level cpu set and a container sets memory: no defaults at all",
            pod(
                json!({"resources": {"requests": {"cpu": "2"}}, "containers": [c("a", json!({"memory": "1Gi"})), bare("b")]}),
            ),
            res(2000, GI),
            res(2000, GI),
        ),
        (
            "overhead is not a default",
            pod(json!({"containers": [bare("a")], "overhead": {"cpu": "10m"}})),
            res(10, 0),
            res(DEFAULT_MILLI_CPU_REQUEST + 10, DEFAULT_MEMORY_REQUEST),
        ),
    ];
    for (name, p, requests, non_zero) in cases {
        let got = pod_resources(&p);
        assert_eq!(got.requests, requests, "{name}: requests");
        assert_eq!(got.non_zero, non_zero, "{name}: non_zero");
        assert!(got.invalid.is_empty(), "{name}");
    }

    // The option itself, with the public Resource form.
    let p = pod(json!({"containers": [bare("a"), c("b", json!({"cpu": "1"}))]}));
    let opts = PodRequestOptions {
        non_missing_container_requests: Some(res(100, 0)),
        ..PodRequestOptions::default()
    };
    assert_eq!(pod_requests(&p, &opts), res(1100, 0));
}

#[test]
fn limits() {
    let d = PodRequestOptions::default();
    let p = pod(json!({
        "initContainers": [c_lim("i", json!({}), json!({"cpu": "3"}))],
        "containers": [
            c_lim("a", json!({"cpu": "1"}), json!({"cpu": "1", "memory": "1Gi"})),
            c_lim("b", json!({"cpu": "1"}), json!({"cpu": "1"})),
        ],
        "overhead": {"cpu": "100m", "memory": "50Mi", "ephemeral-storage": "1Gi"},
    }));
    // cpu: max(2, 3) + overhead; memory: 1Gi + overhead; no ephemeral-storage limit → not added.
    assert_eq!(pod_limits(&p, &d), res(3100, GI + 50 * MI));

    let p = pod(json!({
        "resources": {"limits": {"cpu": "4"}},
        "containers": [c_lim("a", json!({}), json!({"cpu": "1", "memory": "1Gi"}))],
    }));
    assert_eq!(pod_limits(&p, &d), res(4000, GI));
    let skip = PodRequestOptions {
        skip_pod_level_resources: true,
        ..PodRequestOptions::default()
    };
    assert_eq!(pod_limits(&p, &skip), res(1000, GI));

    // Zero limits do not get overhead.
    let p = pod(json!({
        "containers": [c_lim("a", json!({}), json!({"cpu": "0"}))],
        "overhead": {"cpu": "100m"},
    }));
    assert_eq!(pod_limits(&p, &d), res(0, 0));
}

// ---------------------------------------------------------------------------------------------
// KEP-5517 node-allocatable claims

fn claim(name: &str, containers: &[&str], mapping: Value, overhead: Value) -> Value {
    json!({"resourceClaimName": name, "containers": containers, "mapping": mapping, "overhead": overhead})
}

#[test]
fn node_allocatable_claims() {
    let two = json!({"containers": [c("a", json!({"cpu": "1", "memory": "1Gi"})), c("b", json!({"cpu": "1", "memory": "1Gi"}))]});
    run(vec![
        Case {
            name: "claims are ignored unless asked for",
            pod: pod_with_claims(
                two.clone(),
                json!([claim(
                    "x",
                    &["a"],
                    json!([{"name": "memory", "quantity": "4Gi"}]),
                    json!([])
                )]),
            ),
            opts: PodRequestOptions::default(),
            want: res(2000, 2 * GI),
        },
        Case {
            name: "mapping counts once although two containers reference the claim",
            pod: pod_with_claims(
                two.clone(),
                json!([claim(
                    "x",
                    &["a", "b"],
                    json!([{"name": "memory", "quantity": "4Gi"}, {"name": "cpu", "quantity": "2"}]),
                    json!([])
                )]),
            ),
            opts: claims_opts(),
            want: res(4000, 6 * GI),
        },
        Case {
            name: "perContainer overhead is charged per referencing container, perPod once",
            pod: pod_with_claims(
                two.clone(),
                json!([claim(
                    "x",
                    &["a", "b"],
                    json!([]),
                    json!([{"name": "memory", "perPod": "100Mi", "perContainer": "10Mi"}])
                )]),
            ),
            opts: claims_opts(),
            want: res(2000, 2 * GI + 120 * MI),
        },
        Case {
            name: "an unreferenced claim still counts once; its perContainer overhead counts zero times",
            pod: pod_with_claims(
                two.clone(),
                json!([{"resourceClaimName": "x",
                        "mapping": [{"name": "hugepages-1Gi", "quantity": "2Gi"}],
                        "overhead": [{"name": "memory", "perPod": "1Mi", "perContainer": "10Mi"}]}]),
            ),
            opts: claims_opts(),
            want: with(res(2000, 2 * GI + MI), "hugepages-1Gi", 2 * GI),
        },
        Case {
            name: "two claims in one container add up",
            pod: pod_with_claims(
                two.clone(),
                json!([
                    claim(
                        "x",
                        &["a"],
                        json!([{"name": "memory", "quantity": "1Gi"}]),
                        json!([{"name": "cpu", "perContainer": "100m"}])
                    ),
                    claim(
                        "y",
                        &["a"],
                        json!([{"name": "memory", "quantity": "2Gi"}]),
                        json!([{"name": "cpu", "perContainer": "200m"}])
                    ),
                ]),
            ),
            opts: claims_opts(),
            want: res(2300, 5 * GI),
        },
        Case {
            name: "init-only claim: perContainer overhead joins that init container's peak, not the regular sum",
            pod: pod_with_claims(
                json!({
                    "initContainers": [c("i", json!({"cpu": "1"}))],
                    "containers": [c("a", json!({"cpu": "2"}))],
                }),
                json!([claim(
                    "x",
                    &["i"],
                    json!([]),
                    json!([{"name": "cpu", "perContainer": "500m"}])
                )]),
            ),
            opts: claims_opts(),
            // max(2, 1 + 0.5) = 2
            want: res(2000, 0),
        },
        Case {
            name: "init-only claim: overhead can make the init container the peak",
            pod: pod_with_claims(
                json!({
                    "initContainers": [c("i", json!({"cpu": "1800m"}))],
                    "containers": [c("a", json!({"cpu": "2"}))],
                }),
                json!([claim(
                    "x",
                    &["i"],
                    json!([]),
                    json!([{"name": "cpu", "perContainer": "500m"}])
                )]),
            ),
            opts: claims_opts(),
            want: res(2300, 0),
        },
        Case {
            name: "init-only claim: the mapped device is held for the pod's life, so it is added on top",
            pod: pod_with_claims(
                json!({
                    "initContainers": [c("i", json!({"memory": "1Gi"}))],
                    "containers": [c("a", json!({"memory": "2Gi"}))],
                }),
                json!([claim(
                    "x",
                    &["i"],
                    json!([{"name": "memory", "quantity": "4Gi"}]),
                    json!([])
                )]),
            ),
            opts: claims_opts(),
            want: res(0, 6 * GI),
        },
        Case {
            name: "a sidecar's claim overhead joins the long-running sum",
            pod: pod_with_claims(
                json!({
                    "initContainers": [sidecar("s", json!({"cpu": "100m"})), c("i", json!({"cpu": "1"}))],
                    "containers": [c("a", json!({"cpu": "500m"}))],
                }),
                json!([claim(
                    "x",
                    &["s"],
                    json!([]),
                    json!([{"name": "cpu", "perContainer": "50m"}])
                )]),
            ),
            opts: claims_opts(),
            // total = 500 + 150 = 650; init use = 1000 + 150 = 1150
            want: res(1150, 0),
        },
        Case {
            name: "references to containers the pod lacks are charged for the pod's life",
            pod: pod_with_claims(
                two.clone(),
                json!([claim(
                    "x",
                    &["a", "ghost"],
                    json!([]),
                    json!([{"name": "cpu", "perContainer": "100m"}])
                )]),
            ),
            opts: claims_opts(),
            want: res(2200, 2 * GI),
        },
        Case {
            name: "pod-level requests cover DRA: cpu/memory are not added on top",
            pod: pod_with_claims(
                json!({
                    "resources": {"requests": {"cpu": "8", "memory": "16Gi"}},
                    "containers": [c("a", json!({"cpu": "1", "memory": "1Gi"}))],
                }),
                json!([claim(
                    "x",
                    &["a"],
                    json!([{"name": "memory", "quantity": "4Gi"}, {"name": "hugepages-2Mi", "quantity": "8Mi"}]),
                    json!([])
                )]),
            ),
            opts: claims_opts(),
            want: with(res(8000, 16 * GI), "hugepages-2Mi", 8 * MI),
        },
    ]);
}

#[test]
fn claim_statuses_given_explicitly_and_footprint() {
    let p = pod(json!({
        "initContainers": [c("i", json!({"cpu": "1800m"}))],
        "containers": [c("a", json!({"cpu": "2", "memory": "1Gi"}))],
        "overhead": {"cpu": "100m"},
    }));
    let statuses: Vec<NodeAllocatableResourceClaimStatus> = serde_json::from_value(json!([
        claim(
            "x",
            &["i"],
            json!([{"name": "memory", "quantity": "4Gi"}]),
            json!([{"name": "cpu", "perContainer": "500m"}])
        ),
        claim(
            "y",
            &["a"],
            json!([]),
            json!([{"name": "cpu", "perContainer": "0.1"}])
        ),
    ]))
    .unwrap();
    let base = pod_requests(&p, &claims_opts());
    assert_eq!(base, res(2100, GI));
    let with_claims = pod_requests_with_claims(&p, &statuses, &PodRequestOptions::default());
    // long-running 2.1, init 2.3 → 2.3 + overhead 0.1; memory 1Gi + 4Gi
    assert_eq!(with_claims, res(2400, 5 * GI));
    let footprint = node_allocatable_claim_footprint(&statuses, &p);
    assert_eq!(footprint, res(300, 4 * GI));
    let mut sum = base.clone();
    sum.add(&footprint);
    assert_eq!(sum, with_claims);

    // The same statuses on the pod itself give the same result through pod_resources.
    let on_pod = pod_with_claims(
        json!({
            "initContainers": [c("i", json!({"cpu": "1800m"}))],
            "containers": [c("a", json!({"cpu": "2", "memory": "1Gi"}))],
            "overhead": {"cpu": "100m"},
        }),
        serde_json::to_value(&statuses).unwrap(),
    );
    assert_eq!(pod_resources(&on_pod).requests, with_claims);

    // Pod-level requests absorb the claims' cpu/memory.
    let p = pod(json!({
        "resources": {"requests": {"cpu": "8", "memory": "16Gi"}},
        "containers": [c("a", json!({"cpu": "1"}))],
    }));
    assert_eq!(
        node_allocatable_claim_footprint(&statuses, &p),
        Resource::default()
    );
    assert_eq!(node_allocatable_claim_footprint(&[], &p), Resource::default());
}

#[test]
fn claims_in_limits() {
    let p = pod_with_claims(
        json!({"containers": [c_lim("a", json!({}), json!({"cpu": "1"}))]}),
        json!([claim(
            "x",
            &["a"],
            json!([{"name": "memory", "quantity": "4Gi"}, {"name": "cpu", "quantity": "2"}, {"name": "hugepages-2Mi", "quantity": "4Mi"}]),
            json!([])
        )]),
    );
    // memory has no declared limit → the DRA amount is dropped; hugepages are always kept.
    assert_eq!(
        pod_limits(&p, &claims_opts()),
        with(res(3000, 0), "hugepages-2Mi", 4 * MI)
    );
    assert_eq!(pod_limits(&p, &PodRequestOptions::default()), res(1000, 0));
}

#[test]
fn invalid_quantities_are_reported_not_fatal() {
    let p = pod_with_claims(
        json!({
            "initContainers": [c("i", json!({"cpu": "lots"}))],
            "containers": [c("a", json!({"cpu": "1", "memory": "1Gi", "example.com/gpu": "1.1.1"})), c("b", json!({"cpu": "1", "memory": "1Gi"}))],
            "overhead": {"memory": "??"},
        }),
        json!([claim(
            "x",
            &["a"],
            json!([{"name": "memory", "quantity": "4 Gi"}]),
            json!([{"name": "cpu", "perPod": "", "perContainer": "1Q"}])
        )]),
    );
    let got = pod_resources(&p);
    assert_eq!(got.requests, res(2000, 2 * GI));
    // container `a` keeps its valid entries and still gets no cpu default
    assert_eq!(got.non_zero, res(2000, 2 * GI));
    let mut invalid: Vec<(String, String)> = got
        .invalid
        .iter()
        .map(|i| (i.resource.clone(), i.value.clone()))
        .collect();
    invalid.sort();
    let mut want: Vec<(String, String)> = [
        ("cpu", "lots"),
        ("example.com/gpu", "1.1.1"),
        ("memory", "??"),
        ("memory", "4 Gi"),
        ("cpu", ""),
        ("cpu", "1Q"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    want.sort();
    assert_eq!(invalid, want);

    let (r, inv) = pod_requests_checked(&p, &PodRequestOptions::default());
    assert_eq!(r, res(2000, 2 * GI));
    assert!(inv.contains(&InvalidQuantity {
        resource: "cpu".into(),
        value: "lots".into()
    }));
}

#[test]
fn huge_values_saturate_instead_of_panicking() {
    let p = pod(json!({"containers": [
        c("a", json!({"cpu": "9223372036854775807", "memory": "99999999999999999999E"})),
        c("b", json!({"cpu": "9223372036854775807", "memory": "8Ei"})),
    ]}));
    let got = pod_resources(&p);
    assert_eq!(got.requests.milli_cpu, i64::MAX);
    // the 1e38-byte memory request is out of range → reported invalid, the other one counts
    assert_eq!(got.requests.memory, i64::MAX);
    assert_eq!(got.invalid.len(), 1);
}
