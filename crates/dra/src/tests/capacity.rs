//! Consumable capacity: request policies, shares of multi-allocatable devices.

use super::*;

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
