//! Shared counters of partitionable devices: charged per device, never overdrawn.

use super::*;

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

/// Negative shared counters (a negative total, or a device consuming a negative
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
