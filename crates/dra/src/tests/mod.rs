//! Table-driven allocator tests, one table per concern.

mod drivers;
mod fast_path;
mod props;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::AllocationResult;

use crate::testing::*;
use crate::{AllocationError, Deadline, Features};

/// What a case expects.
#[derive(Debug)]
enum Expect {
    /// Device names per claim, in result order.
    Devices(Vec<Vec<&'static str>>),
    /// Unschedulable with this reason kind.
    Unsched(&'static str),
    /// Unschedulable whose message contains this text.
    UnschedMsg(&'static str),
    /// Fatal error whose message contains this text.
    Fatal(&'static str),
}

struct Case {
    name: &'static str,
    fixture: Fixture,
    node: Node,
    expect: Expect,
}

fn case(name: &'static str, node_name: &str, fixture: Fixture, expect: Expect) -> Case {
    Case {
        name,
        fixture,
        node: node(node_name),
        expect,
    }
}

fn run(cases: Vec<Case>) {
    for c in cases {
        let got = c.fixture.allocate(&c.node);
        check(c.name, &got, &c.expect);
    }
}

fn check(name: &str, got: &Result<Vec<AllocationResult>, AllocationError>, expect: &Expect) {
    match (expect, got) {
        (Expect::Devices(want), Ok(results)) => {
            let have: Vec<Vec<String>> = results.iter().map(device_names).collect();
            let want: Vec<Vec<String>> = want
                .iter()
                .map(|v| v.iter().map(|s| s.to_string()).collect())
                .collect();
            assert_eq!(have, want, "case {name}");
        }
        (Expect::Unsched(kind), Err(AllocationError::Unschedulable(u))) => {
            assert_eq!(u.reason.kind(), *kind, "case {name}: {u}");
        }
        (Expect::UnschedMsg(text), Err(AllocationError::Unschedulable(u))) => {
            assert!(
                u.to_string().contains(text),
                "case {name}: {u:?} should mention {text:?}"
            );
        }
        (Expect::Fatal(text), Err(AllocationError::Fatal(e))) => {
            assert!(
                e.to_string().contains(text),
                "case {name}: {e} should mention {text:?}"
            );
        }
        _ => panic!("case {name}: expected {expect:?}, got {got:?}"),
    }
}

const GPU: &str = "gpu.example.com";

fn gpus(node_name: &str, n: usize) -> SliceBuilder {
    slice(&format!("{node_name}-gpu"), GPU, node_name, node_name).devices((0..n).map(|i| {
        dev(&format!("gpu-{i}"))
            .int("index", i as i64)
            .string("model", "a100")
    }))
}

fn fx(slices: Vec<SliceBuilder>, claims: Vec<ClaimBuilder>) -> Fixture {
    Fixture {
        slices: slices.into_iter().map(SliceBuilder::build).collect(),
        classes: vec![class("gpu", GPU), class_with("any", &[])],
        claims: claims.into_iter().map(ClaimBuilder::build).collect(),
        ..Default::default()
    }
}

fn one(r: RequestBuilder) -> ClaimBuilder {
    claim("ns", "c").request(r)
}

#[test]
fn pools_table() {
    let node_a = "node-a";
    run(vec![
        case(
            "simple",
            node_a,
            fx(vec![gpus(node_a, 2)], vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["gpu-0"]]),
        ),
        case(
            "other node's slice is invisible",
            node_a,
            fx(vec![gpus("node-b", 2)], vec![one(req("r", "gpu"))]),
            Expect::Unsched("no-devices"),
        ),
        case(
            "newer generation shadows an older one",
            node_a,
            fx(
                vec![
                    slice("old", GPU, node_a, node_a)
                        .generation(1)
                        .device(dev("old-0")),
                    slice("new", GPU, node_a, node_a)
                        .generation(2)
                        .device(dev("new-0")),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["new-0"]]),
        ),
        case(
            "incomplete pool ignored",
            node_a,
            fx(
                vec![
                    slice("p1-a", GPU, node_a, "p1").count(2).device(dev("inc-0")),
                    slice("p2", GPU, node_a, "p2").device(dev("ok-0")),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["ok-0"]]),
        ),
        case(
            "only an incomplete pool",
            node_a,
            fx(
                vec![slice("p1-a", GPU, node_a, "p1").count(2).device(dev("inc-0"))],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Unsched("pools-incomplete"),
        ),
        case(
            "pool complete across two slices, sorted by slice name",
            node_a,
            fx(
                vec![
                    slice("p-b", GPU, node_a, "p").count(2).device(dev("b-0")),
                    slice("p-a", GPU, node_a, "p").count(2).device(dev("a-0")),
                ],
                vec![one(req("r", "gpu").count(2))],
            ),
            Expect::Devices(vec![vec!["a-0", "b-0"]]),
        ),
        case(
            "pools in (driver, pool) order",
            node_a,
            fx(
                vec![
                    slice("s1", GPU, node_a, "zz").device(dev("z-0")),
                    slice("s2", GPU, node_a, "aa").device(dev("a-0")),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["a-0"]]),
        ),
        case(
            "duplicate device names make the pool invalid",
            node_a,
            fx(
                vec![
                    slice("p-a", GPU, node_a, "p").count(2).device(dev("dup")),
                    slice("p-b", GPU, node_a, "p").count(2).device(dev("dup")),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::UnschedMsg("duplicate device name dup"),
        ),
        case(
            "missing counter set makes the pool invalid",
            node_a,
            fx(
                vec![slice("s", GPU, node_a, "p").device(dev("d").consumes("nope", &[("mem", "1")]))],
                vec![one(req("r", "gpu"))],
            ),
            Expect::UnschedMsg("counter set nope not found"),
        ),
        case(
            "invalid pool reported only when allocation fails",
            node_a,
            fx(
                vec![
                    slice("bad", GPU, node_a, "bad").device(dev("d").consumes("nope", &[("mem", "1")])),
                    slice("good", GPU, node_a, "good").device(dev("g")),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["g"]]),
        ),
        case(
            "allNodes slice",
            node_a,
            fx(
                vec![slice("net", GPU, "x", "net").all_nodes().device(dev("n0"))],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["n0"]]),
        ),
        case(
            "nodeSelector slice that does not match",
            node_a,
            fx(
                vec![
                    slice("net", GPU, "x", "net")
                        .node_selector(label_selector(&[("rack", "r1")]))
                        .device(dev("n0")),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Unsched("no-devices"),
        ),
        case(
            "perDeviceNodeSelection picks the node's device",
            node_a,
            fx(
                vec![
                    slice("pd", GPU, "x", "pd")
                        .per_device()
                        .device(dev("b0").on_node("node-b"))
                        .device(dev("a0").on_node(node_a)),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["a0"]]),
        ),
        case(
            "perDeviceNodeSelection allNodes device",
            node_a,
            fx(
                vec![
                    slice("pd", GPU, "x", "pd")
                        .per_device()
                        .device(dev("any").all_nodes()),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::Devices(vec![vec!["any"]]),
        ),
    ]);

    // nodeSelector matching a labelled node.
    let f = fx(
        vec![
            slice("net", GPU, "x", "net")
                .node_selector(label_selector(&[("rack", "r1")]))
                .device(dev("n0")),
        ],
        vec![one(req("r", "gpu"))],
    );
    let got = f.allocate(&node_with_labels("node-a", &[("rack", "r1")]));
    check("nodeSelector match", &got, &Expect::Devices(vec![vec!["n0"]]));
    let sel = got.unwrap()[0].node_selector.clone().unwrap();
    let term = &sel.node_selector_terms[0];
    assert_eq!(
        term.match_expressions.as_ref().unwrap()[0].key,
        "rack",
        "result node selector copies the slice's"
    );
}

#[test]
fn requests_table() {
    let n = "n";
    run(vec![
        case(
            "exact count 3",
            n,
            fx(vec![gpus(n, 4)], vec![one(req("r", "gpu").count(3))]),
            Expect::Devices(vec![vec!["gpu-0", "gpu-1", "gpu-2"]]),
        ),
        case(
            "exact count too large",
            n,
            fx(vec![gpus(n, 2)], vec![one(req("r", "gpu").count(3))]),
            Expect::Unsched("not-enough-devices"),
        ),
        case(
            "all mode",
            n,
            fx(vec![gpus(n, 3)], vec![one(req("r", "gpu").all())]),
            Expect::Devices(vec![vec!["gpu-0", "gpu-1", "gpu-2"]]),
        ),
        case(
            "all mode with selector",
            n,
            fx(
                vec![gpus(n, 3)],
                vec![one(req("r", "gpu")
                    .all()
                    .selector(r#"device.attributes["gpu.example.com"].index > 0"#))],
            ),
            Expect::Devices(vec![vec!["gpu-1", "gpu-2"]]),
        ),
        case(
            "all mode on a node with zero matching devices",
            n,
            fx(
                vec![gpus(n, 3)],
                vec![one(req("r", "gpu")
                    .all()
                    .selector(r#"device.attributes["gpu.example.com"].index > 5"#))],
            ),
            Expect::Unsched("all-mode-no-devices"),
        ),
        case(
            "all mode on a node without devices",
            n,
            fx(vec![], vec![one(req("r", "gpu").all())]),
            Expect::Unsched("all-mode-no-devices"),
        ),
        case(
            "all mode fails when one device is in use",
            n,
            {
                let mut f = fx(vec![gpus(n, 2)], vec![one(req("r", "gpu").all())]);
                f.allocated = vec![allocated(
                    claim("ns", "other").build(),
                    alloc_of(&[("r", GPU, n, "gpu-1")]),
                )];
                f
            },
            Expect::Unsched("in-use"),
        ),
        case(
            "all mode with an incomplete pool",
            n,
            fx(
                vec![gpus(n, 1), slice("inc", GPU, n, "inc").count(2).device(dev("i"))],
                vec![one(req("r", "gpu").all())],
            ),
            Expect::Unsched("all-mode-pool-unavailable"),
        ),
        case(
            "class selector",
            n,
            {
                let mut f = fx(
                    vec![gpus(n, 2), slice("other", "other.com", n, "o").device(dev("x"))],
                    vec![one(req("r", "oc"))],
                );
                f.classes.push(class("oc", "other.com"));
                f
            },
            Expect::Devices(vec![vec!["x"]]),
        ),
        case(
            "class selector matches nothing",
            n,
            {
                let mut f = fx(vec![gpus(n, 2)], vec![one(req("r", "oc"))]);
                f.classes.push(class("oc", "other.com"));
                f
            },
            Expect::UnschedMsg("device class oc"),
        ),
        case(
            "request selector",
            n,
            fx(
                vec![gpus(n, 3)],
                vec![one(
                    req("r", "gpu").selector(r#"device.attributes["gpu.example.com"].index == 2"#)
                )],
            ),
            Expect::Devices(vec![vec!["gpu-2"]]),
        ),
        case(
            "request selector matches nothing, names the expression",
            n,
            fx(
                vec![gpus(n, 3)],
                vec![one(req("r", "gpu").selector(
                    r#"device.attributes["gpu.example.com"].model == "h100""#,
                ))],
            ),
            Expect::UnschedMsg(r#"model == "h100""#),
        ),
        case(
            "prioritized list falls back to the second subrequest",
            n,
            fx(
                vec![gpus(n, 2)],
                vec![one(first_available(
                    "r",
                    vec![
                        req("big", "gpu").selector(r#"device.attributes["gpu.example.com"].model == "h100""#),
                        req("small", "gpu").count(2),
                    ],
                ))],
            ),
            Expect::Devices(vec![vec!["gpu-0", "gpu-1"]]),
        ),
        case(
            "prioritized list takes the first subrequest when it fits",
            n,
            fx(
                vec![gpus(n, 4)],
                vec![one(first_available(
                    "r",
                    vec![req("a", "gpu").count(3), req("b", "gpu")],
                ))],
            ),
            Expect::Devices(vec![vec!["gpu-0", "gpu-1", "gpu-2"]]),
        ),
        case(
            "prioritized list: none fits reports the first",
            n,
            fx(
                vec![gpus(n, 1)],
                vec![one(first_available(
                    "r",
                    vec![req("a", "gpu").count(3), req("b", "gpu").count(2)],
                ))],
            ),
            Expect::UnschedMsg("request r/a"),
        ),
        case(
            "two claims do not share a device",
            n,
            fx(
                vec![gpus(n, 2)],
                vec![
                    claim("ns", "a").request(req("r", "gpu")),
                    claim("ns", "b").request(req("r", "gpu")),
                ],
            ),
            Expect::Devices(vec![vec!["gpu-0"], vec!["gpu-1"]]),
        ),
        case(
            "two claims, one device",
            n,
            fx(
                vec![gpus(n, 1)],
                vec![
                    claim("ns", "a").request(req("r", "gpu")),
                    claim("ns", "b").request(req("r", "gpu")),
                ],
            ),
            Expect::UnschedMsg("claim ns/b"),
        ),
        case(
            "allocated devices are skipped",
            n,
            {
                let mut f = fx(vec![gpus(n, 2)], vec![one(req("r", "gpu"))]);
                f.allocated = vec![allocated(
                    claim("ns", "other").build(),
                    alloc_of(&[("r", GPU, n, "gpu-0")]),
                )];
                f
            },
            Expect::Devices(vec![vec!["gpu-1"]]),
        ),
        case(
            "in-flight allocations are skipped",
            n,
            {
                let mut f = fx(vec![gpus(n, 2)], vec![one(req("r", "gpu"))]);
                f.in_flight = vec![allocated(
                    claim("ns", "other").build(),
                    alloc_of(&[("r", GPU, n, "gpu-0")]),
                )];
                f
            },
            Expect::Devices(vec![vec!["gpu-1"]]),
        ),
        case(
            "all devices in use",
            n,
            {
                let mut f = fx(vec![gpus(n, 1)], vec![one(req("r", "gpu"))]);
                f.allocated = vec![allocated(
                    claim("ns", "other").build(),
                    alloc_of(&[("r", GPU, n, "gpu-0")]),
                )];
                f
            },
            Expect::Unsched("in-use"),
        ),
        case(
            "admin access on an allocated device",
            n,
            {
                let mut f = fx(vec![gpus(n, 1)], vec![one(req("r", "gpu").admin())]);
                f.allocated = vec![allocated(
                    claim("ns", "other").build(),
                    alloc_of(&[("r", GPU, n, "gpu-0")]),
                )];
                f
            },
            Expect::Devices(vec![vec!["gpu-0"]]),
        ),
        case(
            "admin access all mode includes allocated devices",
            n,
            {
                let mut f = fx(vec![gpus(n, 2)], vec![one(req("r", "gpu").admin().all())]);
                f.allocated = vec![allocated(
                    claim("ns", "other").build(),
                    alloc_of(&[("r", GPU, n, "gpu-0")]),
                )];
                f
            },
            Expect::Devices(vec![vec!["gpu-0", "gpu-1"]]),
        ),
        case(
            "admin access cannot take the same device twice in one claim",
            n,
            fx(vec![gpus(n, 1)], vec![one(req("r", "gpu").admin().count(2))]),
            Expect::Unsched("not-enough-devices"),
        ),
        case(
            "missing class is fatal",
            n,
            fx(vec![gpus(n, 1)], vec![one(req("r", "nope"))]),
            Expect::Fatal("could not retrieve device class nope"),
        ),
        case(
            "unknown mode is fatal",
            n,
            fx(vec![gpus(n, 1)], vec![one(req("r", "gpu").mode("Some"))]),
            Expect::Fatal("unsupported count mode Some"),
        ),
        case(
            "more than 32 devices is fatal",
            n,
            fx(vec![gpus(n, 40)], vec![one(req("r", "gpu").count(33))]),
            Expect::Fatal("exceeds the claim limit of 32"),
        ),
        case(
            "exactly 32 devices",
            n,
            fx(vec![gpus(n, 40)], vec![one(req("r", "gpu").count(32))]),
            Expect::Devices(vec![(0..32).map(|i| GPU_NAMES[i]).collect()]),
        ),
        case(
            "all mode with more than 32 devices",
            n,
            fx(vec![gpus(n, 40)], vec![one(req("r", "gpu").all())]),
            Expect::Unsched("too-many-devices"),
        ),
        case(
            "firstAvailable falls back when the first alternative exceeds 32 devices together with others",
            n,
            fx(
                vec![gpus(n, 40)],
                vec![
                    claim("ns", "c")
                        .request(req("x", "gpu").count(30))
                        .request(first_available(
                            "r",
                            vec![req("many", "gpu").count(4), req("few", "gpu").count(2)],
                        )),
                ],
            ),
            Expect::Devices(vec![(0..32).map(|i| GPU_NAMES[i]).collect()]),
        ),
    ]);

    // Feature gates.
    let mut f = fx(vec![gpus("n", 1)], vec![one(req("r", "gpu").admin())]);
    f.features = Features {
        admin_access: false,
        ..Features::default()
    };
    check(
        "admin access disabled",
        &f.allocate(&node("n")),
        &Expect::Fatal("admin access is requested, but the feature is disabled"),
    );
    let mut f = fx(
        vec![gpus("n", 1)],
        vec![one(first_available("r", vec![req("a", "gpu")]))],
    );
    f.features = Features {
        prioritized_list: false,
        ..Features::default()
    };
    check(
        "prioritized list disabled",
        &f.allocate(&node("n")),
        &Expect::Fatal("DRAPrioritizedList feature is disabled"),
    );
}

const GPU_NAMES: [&str; 40] = [
    "gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5", "gpu-6", "gpu-7", "gpu-8", "gpu-9", "gpu-10",
    "gpu-11", "gpu-12", "gpu-13", "gpu-14", "gpu-15", "gpu-16", "gpu-17", "gpu-18", "gpu-19", "gpu-20",
    "gpu-21", "gpu-22", "gpu-23", "gpu-24", "gpu-25", "gpu-26", "gpu-27", "gpu-28", "gpu-29", "gpu-30",
    "gpu-31", "gpu-32", "gpu-33", "gpu-34", "gpu-35", "gpu-36", "gpu-37", "gpu-38", "gpu-39",
];

/// An allocation result naming (request, driver, pool, device) tuples.
fn alloc_of(devices: &[(&str, &str, &str, &str)]) -> AllocationResult {
    use k8s_openapi::api::resource::v1::{DeviceAllocationResult, DeviceRequestAllocationResult};
    AllocationResult {
        devices: Some(DeviceAllocationResult {
            results: Some(
                devices
                    .iter()
                    .map(|(r, d, p, n)| DeviceRequestAllocationResult {
                        request: r.to_string(),
                        driver: d.to_string(),
                        pool: p.to_string(),
                        device: n.to_string(),
                        ..Default::default()
                    })
                    .collect(),
            ),
            config: None,
        }),
        ..Default::default()
    }
}

#[test]
fn cel_errors_table() {
    let n = "n";
    run(vec![
        case(
            "runtime error in a request selector is fatal and names request and expression",
            n,
            fx(vec![gpus(n, 2)], vec![one(req("r", "gpu").selector(r#"device.attributes["gpu.example.com"].nosuch == 1"#))]),
            Expect::Fatal(r#"request r: selector #0 "device.attributes[\"gpu.example.com\"].nosuch == 1" on device gpu.example.com/n/gpu-0: CEL runtime error: no such key"#),
        ),
        case(
            "runtime error in a class selector names the class",
            n,
            {
                let mut f = fx(vec![gpus(n, 2)], vec![one(req("r", "broken"))]);
                f.classes.push(class_with("broken", &[r#"device.attributes["gpu.example.com"].nosuch"#]));
                f
            },
            Expect::Fatal("class broken: selector #0"),
        ),
        case(
            "non-bool result is an error",
            n,
            fx(vec![gpus(n, 1)], vec![one(req("r", "gpu").selector(r#"device.attributes["gpu.example.com"].index"#))]),
            Expect::Fatal("could not be converted to bool"),
        ),
        case(
            "compile error is fatal",
            n,
            fx(vec![gpus(n, 1)], vec![one(req("r", "gpu").selector("device.driver =="))]),
            Expect::Fatal("CEL compile error"),
        ),
        case(
            "driver prefilter avoids errors on other drivers' devices",
            n,
            {
                let mut f = fx(
                    vec![slice("o", "other.com", n, "o").device(dev("x")), gpus(n, 1)],
                    vec![one(req("r", "gpu").selector(r#"device.attributes["gpu.example.com"].model == "a100""#))],
                );
                // The class pins the driver, so the request selector is never evaluated for other.com.
                f.classes[0] = class("gpu", GPU);
                f
            },
            Expect::Devices(vec![vec!["gpu-0"]]),
        ),
        case(
            "unknown domain is an empty map",
            n,
            fx(vec![gpus(n, 1)], vec![one(req("r", "gpu").selector(r#"device.attributes["nope.com"].size() == 0"#))]),
            Expect::Devices(vec![vec!["gpu-0"]]),
        ),
        case(
            "cel.bind and quantity",
            n,
            fx(
                vec![slice("s", GPU, n, n).device(dev("small").cap("memory", "40Gi")).device(dev("big").cap("memory", "80Gi"))],
                vec![one(req("r", "gpu").selector(r#"cel.bind(c, device.capacity["gpu.example.com"], c.memory.compareTo(quantity("64Gi")) >= 0)"#))],
            ),
            Expect::Devices(vec![vec!["big"]]),
        ),
        case(
            "semver",
            n,
            fx(
                vec![slice("s", GPU, n, n).device(dev("old").version("driverVersion", "1.0.0")).device(dev("new").version("driverVersion", "2.1.0"))],
                vec![one(req("r", "gpu").selector(r#"device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("2.0.0"))"#))],
            ),
            Expect::Devices(vec![vec!["new"]]),
        ),
        case(
            "list attribute includes",
            n,
            fx(
                vec![slice("s", GPU, n, n).device(dev("a").strings("models", &["x"])).device(dev("b").strings("models", &["x", "y"]))],
                vec![one(req("r", "gpu").selector(r#"device.attributes["gpu.example.com"].models.includes("y")"#))],
            ),
            Expect::Devices(vec![vec!["b"]]),
        ),
        case(
            "allowMultipleAllocations visible",
            n,
            fx(
                vec![slice("s", GPU, n, n).device(dev("a")).device(dev("b").multi())],
                vec![one(req("r", "gpu").selector("device.allowMultipleAllocations"))],
            ),
            Expect::Devices(vec![vec!["b"]]),
        ),
    ]);
}

fn numa(node_name: &str) -> SliceBuilder {
    // gpu-0, gpu-1 on NUMA 0; gpu-2, gpu-3 on NUMA 1; nic-0 on NUMA 1.
    slice("s", GPU, node_name, node_name)
        .device(
            dev("gpu-0")
                .string("type", "gpu")
                .int("numa", 0)
                .int("resource.kubernetes.io/numaNode", 0),
        )
        .device(
            dev("gpu-1")
                .string("type", "gpu")
                .int("numa", 0)
                .int("resource.kubernetes.io/numaNode", 0),
        )
        .device(
            dev("gpu-2")
                .string("type", "gpu")
                .int("numa", 1)
                .int("resource.kubernetes.io/numaNode", 1),
        )
        .device(
            dev("gpu-3")
                .string("type", "gpu")
                .int("numa", 1)
                .int("resource.kubernetes.io/numaNode", 1),
        )
        .device(
            dev("nic-0")
                .string("type", "nic")
                .int("numa", 1)
                .int("resource.kubernetes.io/numaNode", 1),
        )
}

const IS_GPU: &str = r#"device.attributes["gpu.example.com"].type == "gpu""#;
const IS_NIC: &str = r#"device.attributes["gpu.example.com"].type == "nic""#;

#[test]
fn constraints_table() {
    let n = "n";
    run(vec![
        case(
            "matchAttribute forces two devices from the same NUMA node",
            n,
            fx(
                vec![numa(n)],
                vec![
                    claim("ns", "c")
                        .request(req("gpu", "gpu").selector(IS_GPU))
                        .request(req("nic", "gpu").selector(IS_NIC))
                        .match_attribute("gpu.example.com/numa", &[]),
                ],
            ),
            Expect::Devices(vec![vec!["gpu-2", "nic-0"]]),
        ),
        case(
            "matchAttribute with a standard attribute name",
            n,
            fx(
                vec![numa(n)],
                vec![
                    claim("ns", "c")
                        .request(req("gpu", "gpu").selector(IS_GPU))
                        .request(req("nic", "gpu").selector(IS_NIC))
                        .match_attribute("resource.kubernetes.io/numaNode", &["gpu", "nic"]),
                ],
            ),
            Expect::Devices(vec![vec!["gpu-2", "nic-0"]]),
        ),
        case(
            "matchAttribute across a count",
            n,
            {
                let mut f = fx(
                    vec![numa(n)],
                    vec![
                        claim("ns", "c")
                            .request(req("gpu", "gpu").selector(IS_GPU).count(2))
                            .match_attribute("gpu.example.com/numa", &[]),
                    ],
                );
                f.allocated = vec![allocated(
                    claim("ns", "o").build(),
                    alloc_of(&[("r", GPU, n, "gpu-1")]),
                )];
                f
            },
            Expect::Devices(vec![vec!["gpu-2", "gpu-3"]]),
        ),
        case(
            "matchAttribute unsatisfiable",
            n,
            fx(
                vec![numa(n)],
                vec![
                    claim("ns", "c")
                        .request(req("gpu", "gpu").selector(IS_GPU).count(3))
                        .match_attribute("gpu.example.com/numa", &[]),
                ],
            ),
            Expect::Unsched("constraint"),
        ),
        case(
            "matchAttribute missing attribute",
            n,
            fx(
                vec![numa(n)],
                vec![
                    claim("ns", "c")
                        .request(req("gpu", "gpu").selector(IS_GPU))
                        .match_attribute("gpu.example.com/nope", &[]),
                ],
            ),
            Expect::Unsched("constraint"),
        ),
        case(
            "constraint limited to other requests does not apply",
            n,
            fx(
                vec![numa(n)],
                vec![
                    claim("ns", "c")
                        .request(req("gpu", "gpu").selector(IS_GPU).count(3))
                        .request(req("nic", "gpu").selector(IS_NIC))
                        .match_attribute("gpu.example.com/nope", &["nic"]),
                ],
            ),
            Expect::Unsched("constraint"),
        ),
        case(
            "distinctAttribute",
            n,
            fx(
                vec![numa(n)],
                vec![
                    claim("ns", "c")
                        .request(req("gpu", "gpu").selector(IS_GPU).count(2))
                        .distinct_attribute("gpu.example.com/numa", &[]),
                ],
            ),
            Expect::Devices(vec![vec!["gpu-0", "gpu-2"]]),
        ),
        case(
            "distinctAttribute unsatisfiable",
            n,
            fx(
                vec![numa(n)],
                vec![
                    claim("ns", "c")
                        .request(req("gpu", "gpu").selector(IS_GPU).count(3))
                        .distinct_attribute("gpu.example.com/numa", &[]),
                ],
            ),
            Expect::Unsched("constraint"),
        ),
        case(
            "constraint on a subrequest name",
            n,
            fx(
                vec![numa(n)],
                vec![
                    claim("ns", "c")
                        .request(first_available(
                            "gpu",
                            vec![req("two", "gpu").selector(IS_GPU).count(2)],
                        ))
                        .request(req("nic", "gpu").selector(IS_NIC))
                        .match_attribute("gpu.example.com/numa", &["gpu/two", "nic"]),
                ],
            ),
            Expect::Devices(vec![vec!["gpu-2", "gpu-3", "nic-0"]]),
        ),
        case(
            "list attributes intersect",
            n,
            fx(
                vec![
                    slice("s", GPU, n, n)
                        .device(dev("a").ints("pcie", &[1, 2]))
                        .device(dev("b").ints("pcie", &[3]))
                        .device(dev("c").ints("pcie", &[2, 3])),
                ],
                vec![
                    claim("ns", "c")
                        .request(req("r", "gpu").count(2))
                        .match_attribute("gpu.example.com/pcie", &[]),
                ],
            ),
            Expect::Devices(vec![vec!["a", "c"]]),
        ),
        case(
            "all mode with a broken constraint is fatal",
            n,
            fx(
                vec![numa(n)],
                vec![
                    claim("ns", "c")
                        .request(req("gpu", "gpu").selector(IS_GPU).all())
                        .match_attribute("gpu.example.com/numa", &[]),
                ],
            ),
            Expect::Fatal(
                "claim ns/c, request gpu: cannot add device gpu.example.com/n/gpu-2 because a claim constraint would not be satisfied",
            ),
        ),
        case(
            "all mode with a constraint every matching device meets",
            n,
            fx(
                vec![numa(n)],
                vec![
                    claim("ns", "c")
                        .request(
                            req("gpu", "gpu")
                                .selector(r#"device.attributes["gpu.example.com"].numa == 1"#)
                                .all(),
                        )
                        .match_attribute("gpu.example.com/numa", &[]),
                ],
            ),
            Expect::Devices(vec![vec!["gpu-2", "gpu-3", "nic-0"]]),
        ),
        case(
            "unknown constraint type is fatal",
            n,
            {
                let mut c = claim("ns", "c").request(req("r", "gpu"));
                c.0.spec.as_mut().unwrap().devices.as_mut().unwrap().constraints =
                    Some(vec![k8s_openapi::api::resource::v1::DeviceConstraint::default()]);
                fx(vec![gpus(n, 1)], vec![c])
            },
            Expect::Fatal("empty constraint"),
        ),
    ]);
    // Without list-type attributes, list-valued attributes never satisfy a constraint.
    let mut f = fx(
        vec![
            slice("s", GPU, "n", "n")
                .device(dev("a").ints("pcie", &[1, 2]))
                .device(dev("c").ints("pcie", &[2, 3])),
        ],
        vec![
            claim("ns", "c")
                .request(req("r", "gpu").count(2))
                .match_attribute("gpu.example.com/pcie", &[]),
        ],
    );
    f.features.list_type_attributes = false;
    check(
        "list attributes without the feature",
        &f.allocate(&node("n")),
        &Expect::Unsched("constraint"),
    );
}

/// A partitionable GPU: counters in a separate slice of the pool, a full device and two halves.
fn partitionable(node_name: &str) -> Vec<SliceBuilder> {
    vec![
        slice("p-counters", GPU, node_name, node_name)
            .count(2)
            .counter_set("gpu-0-cs", &[("memory", "80Gi"), ("sm", "100")]),
        slice("p-devices", GPU, node_name, node_name)
            .count(2)
            .device(dev("gpu-0-full").consumes("gpu-0-cs", &[("memory", "80Gi"), ("sm", "100")]))
            .device(dev("gpu-0-half-0").consumes("gpu-0-cs", &[("memory", "40Gi"), ("sm", "50")]))
            .device(dev("gpu-0-half-1").consumes("gpu-0-cs", &[("memory", "40Gi"), ("sm", "50")])),
    ]
}

#[test]
fn counters_table() {
    let n = "n";
    run(vec![
        case(
            "full device",
            n,
            fx(partitionable(n), vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["gpu-0-full"]]),
        ),
        case(
            "two halves, never the full device as well",
            n,
            fx(partitionable(n), vec![one(req("r", "gpu").count(2))]),
            Expect::Devices(vec![vec!["gpu-0-half-0", "gpu-0-half-1"]]),
        ),
        case(
            "three devices overdraw",
            n,
            fx(partitionable(n), vec![one(req("r", "gpu").count(3))]),
            Expect::Unsched("counters"),
        ),
        case(
            "counters exhausted by earlier allocations",
            n,
            {
                let mut f = fx(partitionable(n), vec![one(req("r", "gpu"))]);
                f.allocated = vec![allocated(
                    claim("ns", "o").build(),
                    alloc_of(&[("r", GPU, n, "gpu-0-half-0")]),
                )];
                f
            },
            Expect::Devices(vec![vec!["gpu-0-half-1"]]),
        ),
        case(
            "counters fully exhausted by earlier allocations",
            n,
            {
                let mut f = fx(partitionable(n), vec![one(req("r", "gpu"))]);
                f.allocated = vec![allocated(
                    claim("ns", "o").build(),
                    alloc_of(&[("r", GPU, n, "gpu-0-half-0"), ("r", GPU, n, "gpu-0-half-1")]),
                )];
                f
            },
            Expect::Unsched("counters"),
        ),
        case(
            "two claims share the counters",
            n,
            fx(
                partitionable(n),
                vec![
                    claim("ns", "a").request(req("r", "gpu")),
                    claim("ns", "b").request(req("r", "gpu")),
                ],
            ),
            Expect::Devices(vec![vec!["gpu-0-half-0"], vec!["gpu-0-half-1"]]),
        ),
    ]);
    let f = fx(
        partitionable("n"),
        vec![
            claim("ns", "a")
                .request(req("r", "gpu").selector(r#"device.attributes["gpu.example.com"].size() == 0"#)),
            claim("ns", "b").request(req("r", "gpu")),
        ],
    );
    // Claim a takes the full device first (slice order), so claim b cannot get a half; the search
    // backtracks and gives claim a a half instead.
    check(
        "backtracking over counters",
        &f.allocate(&node("n")),
        &Expect::Devices(vec![vec!["gpu-0-half-0"], vec!["gpu-0-half-1"]]),
    );
    let mut f = fx(partitionable("n"), vec![one(req("r", "gpu"))]);
    f.features.partitionable_devices = false;
    check(
        "counters need the feature",
        &f.allocate(&node("n")),
        &Expect::Unsched("counters"),
    );
}

fn cpu_numa(node_name: &str) -> SliceBuilder {
    slice(&format!("{node_name}-cpu"), "dra.cpu", node_name, node_name)
        .device(
            dev("cpudevnuma000")
                .multi()
                .int("resource.kubernetes.io/numaNode", 0)
                .cap("dra.cpu/cpu", "8"),
        )
        .device(
            dev("cpudevnuma001")
                .multi()
                .int("resource.kubernetes.io/numaNode", 1)
                .cap("dra.cpu/cpu", "8"),
        )
}

fn cpu_fx(claims: Vec<ClaimBuilder>) -> Fixture {
    let mut f = fx(vec![cpu_numa("n")], claims);
    f.classes.push(class("dra.cpu", "dra.cpu"));
    f
}

#[test]
fn consumable_capacity_table() {
    let n = "n";
    let cpus = |name: &'static str, q: &str| {
        claim("ns", name).request(req("cpu", "dra.cpu").capacity("dra.cpu/cpu", q))
    };
    run(vec![
        case(
            "one share",
            n,
            cpu_fx(vec![cpus("a", "4")]),
            Expect::Devices(vec![vec!["cpudevnuma000"]]),
        ),
        case(
            "shared by several claims until full",
            n,
            cpu_fx(vec![
                cpus("a", "4"),
                cpus("b", "4"),
                cpus("c", "4"),
                cpus("d", "4"),
            ]),
            Expect::Devices(vec![
                vec!["cpudevnuma000"],
                vec!["cpudevnuma000"],
                vec!["cpudevnuma001"],
                vec!["cpudevnuma001"],
            ]),
        ),
        case(
            "over capacity",
            n,
            cpu_fx(vec![
                cpus("a", "4"),
                cpus("b", "4"),
                cpus("c", "4"),
                cpus("d", "4"),
                cpus("e", "1"),
            ]),
            Expect::UnschedMsg("claim ns/e"),
        ),
        case(
            "request larger than any device",
            n,
            cpu_fx(vec![cpus("a", "9")]),
            Expect::Unsched("capacity"),
        ),
        case(
            "existing shares count",
            n,
            {
                let mut f = cpu_fx(vec![cpus("a", "5")]);
                let mut existing = alloc_of(&[("cpu", "dra.cpu", n, "cpudevnuma000")]);
                let r = &mut existing.devices.as_mut().unwrap().results.as_mut().unwrap()[0];
                r.share_id = Some("00000000-0000-0000-0000-000000000001".into());
                r.consumed_capacity = Some([("dra.cpu/cpu".to_string(), q("4"))].into_iter().collect());
                f.allocated = vec![allocated(claim("ns", "o").build(), existing)];
                f
            },
            Expect::Devices(vec![vec!["cpudevnuma001"]]),
        ),
        case(
            "two requests of one claim share a device",
            n,
            cpu_fx(vec![
                claim("ns", "a")
                    .request(req("x", "dra.cpu").capacity("dra.cpu/cpu", "1"))
                    .request(req("y", "dra.cpu").capacity("dra.cpu/cpu", "1")),
            ]),
            Expect::Devices(vec![vec!["cpudevnuma000", "cpudevnuma000"]]),
        ),
        case(
            "no capacity request takes the whole device",
            n,
            cpu_fx(vec![
                claim("ns", "a").request(req("x", "dra.cpu")),
                cpus("b", "1"),
            ]),
            Expect::Devices(vec![vec!["cpudevnuma000"], vec!["cpudevnuma001"]]),
        ),
        case(
            "unknown capacity name",
            n,
            cpu_fx(vec![
                claim("ns", "a").request(req("x", "dra.cpu").capacity("memory", "1")),
            ]),
            Expect::Unsched("capacity"),
        ),
    ]);

    // Result format: shareID and consumedCapacity, step rounding.
    let mut f = fx(
        vec![
            slice("m", "dra.memory", n, "hp").device(dev("hugepages-2m-x").multi().cap_range(
                "size",
                "4Gi",
                "2Mi",
                "2Mi",
                Some("4Gi"),
                Some("2Mi"),
            )),
        ],
        vec![claim("ns", "m").request(req("mem", "mem").capacity("size", "5Mi"))],
    );
    f.classes.push(class("mem", "dra.memory"));
    let res = f.allocate(&node(n)).unwrap();
    let r = &res[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0];
    assert_eq!(r.consumed_capacity.as_ref().unwrap()["size"].0, "6Mi");
    let share = r.share_id.clone().unwrap();
    assert_eq!(share.len(), 36);
    assert_eq!(f.allocate(&node(n)).unwrap(), res, "deterministic share ids");

    // Valid values.
    let mut f = fx(
        vec![
            slice("net", "dra.net", n, "net").device(dev("eth0").multi().cap_values(
                "bw",
                "100G",
                "10G",
                &["10G", "25G", "50G"],
            )),
        ],
        vec![
            claim("ns", "m").request(req("nic", "net").capacity("bw", "20G")),
            claim("ns", "m2").request(req("nic", "net").capacity("bw", "60G")),
        ],
    );
    f.classes.push(class("net", "dra.net"));
    check(
        "valid values exceeded",
        &f.allocate(&node(n)),
        &Expect::Unsched("capacity"),
    );
    f.claims.pop();
    let res = f.allocate(&node(n)).unwrap();
    assert_eq!(
        res[0].devices.as_ref().unwrap().results.as_ref().unwrap()[0]
            .consumed_capacity
            .as_ref()
            .unwrap()["bw"]
            .0,
        "25G"
    );

    // A multi-allocatable device with counters charges them once.
    let mut f = fx(
        vec![
            slice("c", GPU, n, n).count(2).counter_set("cs", &[("mem", "10")]),
            slice("d", GPU, n, n).count(2).device(
                dev("shared")
                    .multi()
                    .cap("mem", "10")
                    .consumes("cs", &[("mem", "10")]),
            ),
        ],
        vec![
            claim("ns", "a").request(req("r", "gpu").capacity("mem", "4")),
            claim("ns", "b").request(req("r", "gpu").capacity("mem", "4")),
        ],
    );
    check(
        "shares charge counters once",
        &f.allocate(&node(n)),
        &Expect::Devices(vec![vec!["shared"], vec!["shared"]]),
    );
    f.features.consumable_capacity = false;
    check(
        "capacity requests need the feature",
        &f.allocate(&node(n)),
        &Expect::Fatal("DRAConsumableCapacity"),
    );
}

#[test]
fn taints_table() {
    let n = "n";
    let tainted = |effect: &str| {
        slice("s", GPU, n, n)
            .device(dev("t").taint("maintenance", "soon", effect))
            .device(dev("ok"))
    };
    run(vec![
        case(
            "NoSchedule taint skipped",
            n,
            fx(vec![tainted("NoSchedule")], vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["ok"]]),
        ),
        case(
            "NoExecute taint skipped",
            n,
            fx(vec![tainted("NoExecute")], vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["ok"]]),
        ),
        case(
            "None effect ignored",
            n,
            fx(vec![tainted("None")], vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["t"]]),
        ),
        case(
            "unknown effect ignored",
            n,
            fx(vec![tainted("Whatever")], vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["t"]]),
        ),
        case(
            "tolerated by key and value",
            n,
            fx(
                vec![tainted("NoSchedule")],
                vec![one(req("r", "gpu").tolerate(
                    "maintenance",
                    "Equal",
                    "soon",
                    "NoSchedule",
                ))],
            ),
            Expect::Devices(vec![vec!["t"]]),
        ),
        case(
            "tolerated by Exists",
            n,
            fx(
                vec![tainted("NoExecute")],
                vec![one(req("r", "gpu").tolerate("maintenance", "Exists", "", ""))],
            ),
            Expect::Devices(vec![vec!["t"]]),
        ),
        case(
            "tolerated by empty key and Exists",
            n,
            fx(
                vec![tainted("NoExecute")],
                vec![one(req("r", "gpu").tolerate("", "Exists", "", ""))],
            ),
            Expect::Devices(vec![vec!["t"]]),
        ),
        case(
            "wrong value does not tolerate",
            n,
            fx(
                vec![tainted("NoSchedule")],
                vec![one(req("r", "gpu").count(2).tolerate(
                    "maintenance",
                    "Equal",
                    "later",
                    "",
                ))],
            ),
            Expect::Unsched("tainted"),
        ),
        case(
            "wrong effect does not tolerate",
            n,
            fx(
                vec![tainted("NoExecute")],
                vec![one(req("r", "gpu").count(2).tolerate(
                    "maintenance",
                    "Exists",
                    "",
                    "NoSchedule",
                ))],
            ),
            Expect::UnschedMsg("maintenance=soon:NoExecute"),
        ),
    ]);
    // Tolerations are recorded in the result.
    let f = fx(
        vec![tainted("NoSchedule")],
        vec![one(req("r", "gpu").count(2).tolerate(
            "maintenance",
            "Exists",
            "",
            "",
        ))],
    );
    let res = f.allocate(&node(n)).unwrap();
    for r in res[0].devices.as_ref().unwrap().results.as_ref().unwrap() {
        assert_eq!(
            r.tolerations.as_ref().unwrap()[0].key.as_deref(),
            Some("maintenance")
        );
    }
    // DeviceTaintRules.
    use k8s_openapi::api::resource::v1::{
        DeviceTaint, DeviceTaintRule, DeviceTaintRuleSpec, DeviceTaintSelector,
    };
    let mut s = gpus(n, 2).build();
    let rule = DeviceTaintRule {
        spec: DeviceTaintRuleSpec {
            device_selector: Some(DeviceTaintSelector {
                device: Some("gpu-0".into()),
                ..Default::default()
            }),
            taint: DeviceTaint {
                key: "broken".into(),
                value: None,
                effect: "NoSchedule".into(),
                time_added: None,
            },
        },
        ..Default::default()
    };
    let no_selector = DeviceTaintRule {
        spec: DeviceTaintRuleSpec {
            device_selector: None,
            ..rule.spec.clone()
        },
        ..Default::default()
    };
    crate::apply_device_taint_rules(&mut s, &[rule.clone(), rule, no_selector]);
    let devices = s.spec.devices.as_ref().unwrap();
    assert_eq!(devices[0].taints.as_ref().map(Vec::len), Some(1));
    assert!(devices[1].taints.is_none());
    let f = Fixture {
        slices: vec![s],
        classes: vec![class("gpu", GPU)],
        claims: vec![one(req("r", "gpu")).build()],
        ..Default::default()
    };
    check(
        "DeviceTaintRule applied",
        &f.allocate(&node(n)),
        &Expect::Devices(vec![vec!["gpu-1"]]),
    );
}

#[test]
fn binding_conditions_table() {
    let n = "n";
    let slices = || {
        vec![
            slice("a", GPU, n, "a-pool").device(dev("needs-binding").binding_conditions(&["Ready"])),
            slice("b", GPU, n, "b-pool").device(dev("plain")),
        ]
    };
    run(vec![
        case(
            "pools with binding conditions are tried last",
            n,
            fx(slices(), vec![one(req("r", "gpu"))]),
            Expect::Devices(vec![vec!["plain"]]),
        ),
        case(
            "and used when needed",
            n,
            fx(slices(), vec![one(req("r", "gpu").count(2))]),
            Expect::Devices(vec![vec!["plain", "needs-binding"]]),
        ),
    ]);
    let res = fx(slices(), vec![one(req("r", "gpu").count(2))])
        .allocate(&node(n))
        .unwrap();
    let results = res[0].devices.as_ref().unwrap().results.as_ref().unwrap();
    assert_eq!(results[0].binding_conditions, None);
    assert_eq!(results[1].binding_conditions, Some(vec!["Ready".to_string()]));
    assert_eq!(
        results[1].binding_failure_conditions,
        Some(vec!["Failed".to_string()])
    );
    let mut f = fx(slices(), vec![one(req("r", "gpu").count(2))]);
    f.features.binding_conditions = false;
    check(
        "feature off: not selectable",
        &f.allocate(&node(n)),
        &Expect::Unsched("not-enough-devices"),
    );
}

#[test]
fn result_format_table() {
    let n = "n";
    // Node selector: node-local slice -> matchFields on the node name.
    let res = fx(vec![gpus(n, 1)], vec![one(req("r", "gpu"))])
        .allocate(&node(n))
        .unwrap();
    let sel = res[0].node_selector.as_ref().unwrap();
    let f = &sel.node_selector_terms[0].match_fields.as_ref().unwrap()[0];
    assert_eq!(
        (f.key.as_str(), f.operator.as_str(), f.values.clone()),
        ("metadata.name", "In", Some(vec![n.to_string()]))
    );
    // allNodes -> no node selector.
    let res = fx(
        vec![slice("x", GPU, "z", "x").all_nodes().device(dev("d"))],
        vec![one(req("r", "gpu"))],
    )
    .allocate(&node(n))
    .unwrap();
    assert_eq!(res[0].node_selector, None);
    // bindsToNode on an allNodes device -> pinned to the node.
    let res = fx(
        vec![
            slice("x", GPU, "z", "x")
                .all_nodes()
                .device(dev("d").binds_to_node()),
        ],
        vec![one(req("r", "gpu"))],
    )
    .allocate(&node(n))
    .unwrap();
    assert!(res[0].node_selector.is_some());

    // Request names, admin access and configuration.
    let mut f = fx(
        vec![gpus(n, 4)],
        vec![
            claim("ns", "c")
                .request(req("a", "gpu"))
                .request(first_available(
                    "b",
                    vec![req("x", "cfg").count(9), req("y", "cfg")],
                ))
                .request(req("adm", "gpu").admin())
                .config(GPU, &[], serde_json::json!({"all": true}))
                .config(GPU, &["b/y"], serde_json::json!({"sub": true}))
                .config(GPU, &["b/x"], serde_json::json!({"unused": true}))
                .config(GPU, &["a", "b", "adm"], serde_json::json!({"every": true})),
        ],
    );
    f.classes.push(with_class_config(
        class("cfg", GPU),
        GPU,
        serde_json::json!({"class": true}),
    ));
    let res = f.allocate(&node(n)).unwrap();
    let d = res[0].devices.as_ref().unwrap();
    let results = d.results.as_ref().unwrap();
    let names: Vec<(&str, &str, Option<bool>)> = results
        .iter()
        .map(|r| (r.request.as_str(), r.device.as_str(), r.admin_access))
        .collect();
    assert_eq!(
        names,
        vec![
            ("a", "gpu-0", None),
            ("b/y", "gpu-1", None),
            ("adm", "gpu-2", Some(true))
        ]
    );
    let config = d.config.as_ref().unwrap();
    let summary: Vec<(&str, Option<Vec<String>>, String)> = config
        .iter()
        .map(|c| {
            (
                c.source.as_str(),
                c.requests.clone(),
                c.opaque.as_ref().unwrap().parameters.0.to_string(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "FromClass",
                Some(vec!["b/y".to_string()]),
                r#"{"class":true}"#.to_string()
            ),
            ("FromClaim", None, r#"{"all":true}"#.to_string()),
            (
                "FromClaim",
                Some(vec!["b/y".to_string()]),
                r#"{"sub":true}"#.to_string()
            ),
            ("FromClaim", None, r#"{"every":true}"#.to_string()),
        ]
    );
    // Empty claims produce empty results.
    let res = fx(vec![gpus(n, 1)], vec![claim("ns", "empty")])
        .allocate(&node(n))
        .unwrap();
    assert_eq!(
        res[0].devices.as_ref().unwrap().results.as_ref().map(Vec::len),
        Some(0)
    );
}

#[test]
fn search_deadline_and_stats() {
    // 24 devices in 12 NUMA groups of 2, ask 3 devices with a matchAttribute: no solution, so the
    // search backtracks a lot; a deadline in the past aborts it.
    let n = "n";
    let s = slice("s", GPU, n, n).devices((0..24).map(|i| dev(&format!("d{i}")).int("numa", i / 2)));
    let f = fx(
        vec![s],
        vec![
            claim("ns", "c")
                .request(req("r", "gpu").count(3))
                .match_attribute("gpu.example.com/numa", &[]),
        ],
    );
    let alloc = f.allocator().unwrap();
    let err = alloc
        .allocate(&node(n), Deadline::at(std::time::Instant::now()))
        .unwrap_err();
    assert!(matches!(err, AllocationError::Aborted(_)), "{err:?}");
    let cancel = || true;
    let err = alloc
        .allocate(&node(n), Deadline::none().with_cancel(&cancel))
        .unwrap_err();
    assert!(matches!(err, AllocationError::Aborted(_)), "{err:?}");
    let err = alloc.allocate(&node(n), Deadline::none()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "claim ns/c, request r: cannot satisfy constraint matchAttribute gpu.example.com/numa"
    );
    let evals = alloc.stats().selector_evaluations;
    let _ = alloc.allocate(&node(n), Deadline::none());
    assert_eq!(
        alloc.stats().selector_evaluations,
        evals,
        "selector results are cached per device"
    );
}

#[test]
fn index_shared_across_allocators_and_threads() {
    let f = fx(
        (0..8).map(|i| gpus(&format!("n{i}"), 4)).collect(),
        vec![one(req("r", "gpu").count(2))],
    );
    let index = f.index();
    let alloc = Arc::new(f.allocator_with_index(Arc::clone(&index)).unwrap());
    std::thread::scope(|s| {
        for i in 0..8 {
            let alloc = Arc::clone(&alloc);
            s.spawn(move || {
                let res = alloc.allocate(&node(&format!("n{i}")), Deadline::none()).unwrap();
                assert_eq!(device_names(&res[0]), vec!["gpu-0", "gpu-1"]);
            });
        }
    });
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<crate::Allocator>();
    assert_send_sync::<crate::DraSnapshotIndex>();
    assert_send_sync::<crate::CelSelectorEngine>();
}

#[test]
fn match_attribute_over_many_devices_is_not_exponential() {
    // 64 devices on two NUMA nodes, one device of NUMA 0 taken: 32 devices with one NUMA value
    // only fit on NUMA 1. Without constraint-aware pruning this explores ~2^31 subsets.
    let n = "n";
    let s = slice("s", GPU, n, n).devices((0..64).map(|i| dev(&format!("d{i}")).int("numa", i / 32)));
    let mut f = fx(
        vec![s],
        vec![
            claim("ns", "c")
                .request(req("r", "gpu").count(32))
                .match_attribute("gpu.example.com/numa", &[]),
        ],
    );
    f.allocated = vec![allocated(
        claim("ns", "o").build(),
        alloc_of(&[("r", GPU, n, "d5")]),
    )];
    let alloc = f.allocator().unwrap();
    let res = alloc
        .allocate(&node(n), Deadline::after(std::time::Duration::from_secs(10)))
        .unwrap();
    let names = device_names(&res[0]);
    assert_eq!(names.first().map(String::as_str), Some("d32"));
    assert_eq!(names.len(), 32);
    assert!(alloc.stats().search_steps < 10_000, "{:?}", alloc.stats());
    // Same with distinctAttribute: 33 distinct values needed out of 32 is refused quickly.
    let s = slice("s", GPU, n, n).devices((0..40).map(|i| dev(&format!("d{i}")).int("v", i % 31)));
    let f = fx(
        vec![s],
        vec![
            claim("ns", "c")
                .request(req("r", "gpu").count(32))
                .distinct_attribute("gpu.example.com/v", &[]),
        ],
    );
    let alloc = f.allocator().unwrap();
    let err = alloc
        .allocate(&node(n), Deadline::after(std::time::Duration::from_secs(10)))
        .unwrap_err();
    assert!(err.is_unschedulable(), "{err:?}");
    assert!(alloc.stats().search_steps < 100_000, "{:?}", alloc.stats());
}

#[test]
fn over_budget_selector_fails_fast_and_other_claims_still_allocate() {
    use crate::cost::CostLimits;
    let n = "n";
    let list = format!(
        "[{}]",
        (0..100).map(|i| i.to_string()).collect::<Vec<_>>().join(",")
    );
    let heavy = format!("{list}.all(a, {list}.all(b, {list}.all(c, a + b + c >= 0)))");
    let mut f = fx(vec![gpus(n, 3)], vec![one(req("r", "heavy"))]);
    f.classes.push(class_with("heavy", &[&heavy]));
    let node = crate::testing::node(n);

    // Default limits: the estimate rejects the class selector before any evaluation.
    let err = f.allocate(&node).unwrap_err();
    let msg = err.to_string();
    assert!(err.is_fatal(), "{msg}");
    assert!(
        msg.contains("class heavy: selector #0") && msg.contains("cost budget exceeded"),
        "{msg}"
    );

    // Without the estimate, the runtime budget stops the first evaluation; the allocator
    // remembers it, so the next node fails at once without evaluating again.
    f.engine = Arc::new(crate::CelSelectorEngine::with_limits(CostLimits {
        estimated: None,
        runtime: crate::CEL_SELECTOR_EXPRESSION_MAX_COST,
    }));
    let allocator = f.allocator().unwrap();
    let err = allocator.allocate(&node, Deadline::none()).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("class heavy: selector #0") && msg.contains("CEL runtime error: cost budget exceeded"),
        "{msg}"
    );
    assert_eq!(allocator.stats().selector_evaluations, 1);
    assert_eq!(allocator.allocate(&node, Deadline::none()).unwrap_err(), err);
    assert_eq!(allocator.stats().selector_evaluations, 1);

    // An unrelated claim on the same slices and engine still allocates.
    f.claims = vec![one(req("r", "gpu")).build()];
    let got = f.allocate(&node).unwrap();
    assert_eq!(device_names(&got[0]), vec!["gpu-0"]);
}

/// Issue 15.8: negative shared counters (a negative total, or a device consuming a negative
/// amount) must never make room for other devices; the pool is invalid instead.
#[test]
fn negative_counters_never_create_room() {
    let n = "n";
    let with_negative_consumer = || {
        vec![
            slice("p-counters", GPU, n, n)
                .count(2)
                .counter_set("cs", &[("memory", "80Gi")]),
            slice("p-devices", GPU, n, n)
                .count(2)
                .device(dev("full").consumes("cs", &[("memory", "80Gi")]))
                .device(dev("half").consumes("cs", &[("memory", "40Gi")]))
                .device(dev("neg").consumes("cs", &[("memory", "-40Gi")])),
        ]
    };
    run(vec![
        case(
            // Without the check, half + neg leave 80Gi "free" and the full device is handed out
            // on top of the half that is in use.
            "negative consumption of an allocated device",
            n,
            {
                let mut f = fx(with_negative_consumer(), vec![one(req("r", "gpu"))]);
                f.allocated = vec![allocated(
                    claim("ns", "o").build(),
                    alloc_of(&[("r", GPU, n, "half"), ("r", GPU, n, "neg")]),
                )];
                f
            },
            Expect::UnschedMsg("consumes negative amount -40Gi of counter memory"),
        ),
        case(
            "negative consumption, nothing allocated yet",
            n,
            fx(with_negative_consumer(), vec![one(req("r", "gpu").count(2))]),
            Expect::UnschedMsg("consumes negative amount"),
        ),
        case(
            "negative counter total",
            n,
            fx(
                vec![
                    slice("s", GPU, n, n)
                        .counter_set("cs", &[("memory", "-80Gi")])
                        .device(dev("d").consumes("cs", &[("memory", "0")])),
                ],
                vec![one(req("r", "gpu"))],
            ),
            Expect::UnschedMsg("counter set cs counter memory: negative value -80Gi is not allowed"),
        ),
    ]);
}
