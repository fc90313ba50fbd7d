//! Claim constraints: `matchAttribute` and `distinctAttribute`, including list values.

use super::*;

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
