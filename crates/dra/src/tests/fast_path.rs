//! The per-node summary ([`crate::Allocator::fits_without_search`]) against the full allocator,
//! over random clusters and claims: it never says "fits" where the allocator fails (or errors),
//! and for the simple claim shape on plain nodes it decides exactly what the allocator decides.

use proptest::prelude::*;

use crate::testing::*;
use crate::{AllocationError, Deadline, PreparedClaim};

const DRIVER: &str = "drv.example.com";
const OTHER: &str = "other.example.com";
const NODES: usize = 3;

#[derive(Clone, Debug)]
struct DevSpec {
    color: u8,
    /// Has the `healthy` attribute a selector may read (a CEL runtime error where missing).
    healthy: bool,
    multi: bool,
    tainted: bool,
    preallocated: bool,
}

#[derive(Clone, Debug)]
struct NodeSpec {
    devices: Vec<DevSpec>,
    /// A second pool of another driver on the node.
    other_driver: u8,
    /// The main pool says it has two slices but only one exists.
    incomplete: bool,
}

#[derive(Clone, Debug)]
struct ClaimSpec {
    count: u8,
    color: Option<u8>,
    reads_healthy: bool,
    all: bool,
    match_color: bool,
    second_request: bool,
    /// Use the class that matches every driver (only the count limits).
    any_class: bool,
}

fn dev_spec() -> impl Strategy<Value = DevSpec> {
    (
        0..2u8,
        prop::bool::weighted(0.9),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(color, healthy, multi, tainted, preallocated)| DevSpec {
            color,
            healthy,
            multi,
            tainted,
            preallocated,
        })
}

fn node_spec() -> impl Strategy<Value = NodeSpec> {
    (
        prop::collection::vec(dev_spec(), 0..7),
        0..3u8,
        prop::bool::weighted(0.1),
    )
        .prop_map(|(devices, other_driver, incomplete)| NodeSpec {
            devices,
            other_driver,
            incomplete,
        })
}

fn claim_spec() -> impl Strategy<Value = ClaimSpec> {
    (
        1..4u8,
        prop::option::of(0..2u8),
        prop::bool::weighted(0.2),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.1),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(count, color, reads_healthy, all, match_color, second_request, any_class)| ClaimSpec {
                count,
                color,
                reads_healthy,
                all,
                match_color,
                second_request,
                any_class,
            },
        )
}

fn build(nodes: &[NodeSpec], c: &ClaimSpec) -> Fixture {
    let mut slices = Vec::new();
    let mut allocated_claims = Vec::new();
    for (ni, n) in nodes.iter().enumerate() {
        let name = format!("n{ni}");
        let mut s = slice(&format!("{name}-main"), DRIVER, &name, &name);
        if n.incomplete {
            s = s.count(2);
        }
        for (di, d) in n.devices.iter().enumerate() {
            let mut b = dev(&format!("d{di}")).int("color", i64::from(d.color));
            if d.healthy {
                b = b.boolean("healthy", true);
            }
            if d.multi {
                b = b.multi();
            }
            if d.tainted {
                b = b.taint("k", "v", "NoSchedule");
            }
            s = s.device(b);
            if d.preallocated && !d.multi {
                allocated_claims.push(allocated(
                    claim("ns", &format!("pre-{name}-{di}")).build(),
                    one_device_allocation(DRIVER, &name, &format!("d{di}")),
                ));
            }
        }
        slices.push(s.build());
        if n.other_driver > 0 {
            let mut o = slice(&format!("{name}-other"), OTHER, &name, &format!("{name}-o"));
            for i in 0..n.other_driver {
                o = o.device(dev(&format!("o{i}")).int("color", 0));
            }
            slices.push(o.build());
        }
    }
    let class_name = if c.any_class { "any" } else { "cls" };
    let mut r = req("r0", class_name).count(i64::from(c.count));
    if c.all {
        r = r.all();
    }
    if let Some(color) = c.color {
        r = r.selector(&format!("device.attributes[{DRIVER:?}].color == {color}"));
    }
    if c.reads_healthy {
        r = r.selector(&format!("device.attributes[{DRIVER:?}].healthy"));
    }
    let mut cb = claim("ns", "c").request(r);
    if c.second_request {
        cb = cb.request(req("r1", "cls"));
    }
    if c.match_color {
        cb = cb.match_attribute(&format!("{DRIVER}/color"), &[]);
    }
    Fixture {
        slices,
        classes: vec![class("cls", DRIVER), class_with("any", &[])],
        claims: vec![cb.build()],
        allocated: allocated_claims,
        ..Default::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn summary_agrees_with_the_allocator(
        nodes in prop::collection::vec(node_spec(), NODES..=NODES),
        c in claim_spec(),
    ) {
        let f = build(&nodes, &c);
        let alloc = f.allocator().map_err(|e| TestCaseError::fail(e.to_string()))?;
        let claims: Vec<&PreparedClaim> = alloc.claims().iter().map(|c| &**c).collect();
        let simple = !c.all && !c.match_color && !c.second_request;
        for (ni, n) in nodes.iter().enumerate() {
            let node = node(&format!("n{ni}"));
            // Summary first, then the allocator on the same (shared) selector caches: the
            // order the plugin uses (Filter, then Reserve).
            let fast = alloc.fits_without_search(&node, &claims);
            let full = alloc.allocate(&node, Deadline::none());
            if fast {
                prop_assert!(full.is_ok(), "summary says fits on n{ni}, allocator: {full:?}");
            }
            let plain = n.devices.iter().all(|d| !d.multi && !d.tainted);
            if simple && plain && !matches!(full, Err(AllocationError::Fatal(_))) {
                prop_assert_eq!(fast, full.is_ok(), "n{}: {:?}", ni, full);
            }
            if matches!(full, Err(AllocationError::Fatal(_))) {
                prop_assert!(!fast, "n{ni}: fatal error hidden by the summary");
            }
        }
    }
}

/// The table the property relies on: the shapes and devices the summary leaves to the allocator.
#[test]
fn summary_declines_what_it_cannot_decide() {
    struct Case {
        name: &'static str,
        fixture: Fixture,
        want: bool,
    }
    let gpus = |n: usize| {
        let mut s = slice("s", DRIVER, "n", "n");
        for i in 0..n {
            s = s.device(dev(&format!("d{i}")).int("color", 0));
        }
        s
    };
    let fx = |s: SliceBuilder, c: ClaimBuilder| Fixture {
        slices: vec![s.build()],
        classes: vec![class("cls", DRIVER)],
        claims: vec![c.build()],
        ..Default::default()
    };
    let cases = vec![
        Case {
            name: "enough free devices",
            fixture: fx(gpus(2), claim("ns", "c").request(req("r", "cls").count(2))),
            want: true,
        },
        Case {
            name: "too few devices: undecided (the allocator gives the reason)",
            fixture: fx(gpus(1), claim("ns", "c").request(req("r", "cls").count(2))),
            want: false,
        },
        Case {
            name: "constraint",
            fixture: fx(
                gpus(2),
                claim("ns", "c")
                    .request(req("r", "cls"))
                    .match_attribute(&format!("{DRIVER}/color"), &[]),
            ),
            want: false,
        },
        Case {
            name: "all mode",
            fixture: fx(gpus(2), claim("ns", "c").request(req("r", "cls").all())),
            want: false,
        },
        Case {
            name: "two requests",
            fixture: fx(
                gpus(2),
                claim("ns", "c").request(req("a", "cls")).request(req("b", "cls")),
            ),
            want: false,
        },
        Case {
            name: "first available",
            fixture: fx(
                gpus(2),
                claim("ns", "c").request(first_available("r", vec![req("x", "cls")])),
            ),
            want: false,
        },
        Case {
            name: "admin access",
            fixture: fx(gpus(2), claim("ns", "c").request(req("r", "cls").admin())),
            want: false,
        },
        Case {
            name: "capacity request",
            fixture: fx(
                slice("s", DRIVER, "n", "n").device(dev("d0").cap("units", "4")),
                claim("ns", "c").request(req("r", "cls").capacity("units", "1")),
            ),
            want: false,
        },
        Case {
            name: "shared counters on the node",
            fixture: fx(
                gpus(2).counter_set("cs", &[("c", "2")]),
                claim("ns", "c").request(req("r", "cls")),
            ),
            want: false,
        },
        Case {
            name: "multi-allocatable device",
            fixture: fx(
                slice("s", DRIVER, "n", "n").device(dev("d0").multi()),
                claim("ns", "c").request(req("r", "cls")),
            ),
            want: false,
        },
        Case {
            name: "tainted device",
            fixture: fx(
                slice("s", DRIVER, "n", "n").device(dev("d0").taint("k", "v", "NoSchedule")),
                claim("ns", "c").request(req("r", "cls")),
            ),
            want: false,
        },
        Case {
            name: "CEL runtime error on another device",
            fixture: fx(
                slice("s", DRIVER, "n", "n")
                    .device(dev("d0").boolean("healthy", true))
                    .device(dev("d1")),
                claim("ns", "c")
                    .request(req("r", "cls").selector(&format!("device.attributes[{DRIVER:?}].healthy"))),
            ),
            want: false,
        },
    ];
    for c in cases {
        let alloc = c.fixture.allocator().unwrap();
        let claims: Vec<&PreparedClaim> = alloc.claims().iter().map(|c| &**c).collect();
        assert_eq!(
            alloc.fits_without_search(&node("n"), &claims),
            c.want,
            "{}",
            c.name
        );
        if c.want {
            assert!(alloc.allocate(&node("n"), Deadline::none()).is_ok(), "{}", c.name);
        }
    }
}
