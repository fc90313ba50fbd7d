//! Requests: counts, modes, selectors, `firstAvailable` subrequests and admin access.

use super::*;

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
