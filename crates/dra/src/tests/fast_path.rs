//! The per-node summary ([`crate::Allocator::summarize`]) against the full allocator,
//! over random clusters and claims: it never says "fits" where the allocator fails (or errors),
//! never says "short" unless the allocator reports the claim unschedulable there, and for the
//! simple claim shape on plain nodes it decides (both ways) exactly what the allocator decides.
//!
//! The summary caches, per prepared slice, the matching devices of each selector list, so the
//! property runs three rounds over one index (the caches warm from earlier rounds): a first claim
//! and allocated state, a second claim after the state changed (devices allocated and freed, in
//! both layers), and the first claim again under the changed state.

use std::sync::Arc;

use proptest::prelude::*;

use crate::testing::*;
use crate::{
    AllocatedState, AllocationError, Allocator, Deadline, DraSnapshotIndex, NodeSummary, PreparedClaim,
    StateLayers,
};

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
    /// Also (or only) allocated in the in-flight layer.
    in_flight: bool,
    /// `preallocated` flips between the first round and the later ones.
    flips: bool,
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
        prop::bool::weighted(0.15),
        prop::bool::weighted(0.3),
    )
        .prop_map(
            |(color, healthy, multi, tainted, preallocated, in_flight, flips)| DevSpec {
                color,
                healthy,
                multi,
                tainted,
                preallocated,
                in_flight,
                flips,
            },
        )
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

/// The cluster, `c` as the claim, and the allocated state of `round` (0: as generated; later:
/// with the devices marked `flips` allocated or freed).
fn build(nodes: &[NodeSpec], c: &ClaimSpec, round: u8) -> Fixture {
    let mut slices = Vec::new();
    let mut allocated_claims = Vec::new();
    let mut in_flight_claims = Vec::new();
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
            if d.multi {
                continue;
            }
            if d.preallocated != (round > 0 && d.flips) {
                allocated_claims.push(allocated(
                    claim("ns", &format!("pre-{name}-{di}")).build(),
                    one_device_allocation(DRIVER, &name, &format!("d{di}")),
                ));
            }
            if d.in_flight {
                in_flight_claims.push(allocated(
                    claim("ns", &format!("fl-{name}-{di}")).build(),
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
        in_flight: in_flight_claims,
        ..Default::default()
    }
}

/// The summary against the allocator on every node, for one allocator.
fn agree(
    f: &Fixture,
    index: &Arc<DraSnapshotIndex>,
    nodes: &[NodeSpec],
    c: &ClaimSpec,
    round: u8,
) -> Result<(), TestCaseError> {
    let alloc = f
        .allocator_with_index(Arc::clone(index))
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let claims: Vec<&PreparedClaim> = alloc.claims().iter().map(|c| &**c).collect();
    // The shapes the summary decides: one exact-count request, with or without one matchAttribute.
    let simple = !c.all && !c.second_request;
    for (ni, n) in nodes.iter().enumerate() {
        let node = node(&format!("n{ni}"));
        // Summary first, then the allocator on the same (shared) selector caches: the
        // order the plugin uses (Filter, then Reserve).
        let verdict = alloc.summarize(&node, &claims);
        let fast = verdict == NodeSummary::Fits;
        let full = alloc.allocate(&node, Deadline::none());
        if fast {
            prop_assert!(
                full.is_ok(),
                "round {round}: summary says fits on n{ni}, allocator: {full:?}"
            );
        }
        if let NodeSummary::Short { free } = verdict {
            prop_assert!(
                free < c.count.max(1) as usize,
                "round {round}: n{ni}: short with {free} free"
            );
            prop_assert!(
                matches!(full, Err(AllocationError::Unschedulable(_))),
                "round {round}: summary says short on n{ni}, allocator: {full:?}"
            );
        }
        let plain = n.devices.iter().all(|d| !d.multi && !d.tainted);
        if simple && plain && !matches!(full, Err(AllocationError::Fatal(_))) {
            // Decided both ways: a simple claim on plain devices is never left undecided.
            prop_assert_eq!(
                verdict == NodeSummary::Fits,
                full.is_ok(),
                "round {}: n{}: {:?} {:?}",
                round,
                ni,
                verdict,
                full
            );
            prop_assert_ne!(verdict, NodeSummary::Undecided, "round {}: n{}", round, ni);
        }
        if matches!(full, Err(AllocationError::Fatal(_))) {
            prop_assert_eq!(
                verdict,
                NodeSummary::Undecided,
                "round {}: n{}: fatal error hidden by the summary",
                round,
                ni
            );
        }
        // A second look (now from the slice's cached selection) says the same.
        prop_assert_eq!(
            alloc.summarize(&node, &claims),
            verdict,
            "round {}: n{}",
            round,
            ni
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn summary_agrees_with_the_allocator(
        nodes in prop::collection::vec(node_spec(), NODES..=NODES),
        c in claim_spec(),
        c2 in claim_spec(),
    ) {
        let f = build(&nodes, &c, 0);
        // One index (so one set of prepared slices and their caches) and one selector engine
        // (so the same expressions keep their ids) for all rounds.
        let index = f.index();
        agree(&f, &index, &nodes, &c, 0)?;
        let f2 = Fixture { engine: Arc::clone(&f.engine), ..build(&nodes, &c2, 1) };
        agree(&f2, &index, &nodes, &c2, 1)?;
        let f3 = Fixture { engine: Arc::clone(&f.engine), ..build(&nodes, &c, 1) };
        agree(&f3, &index, &nodes, &c, 2)?;
    }
}

/// The table the property relies on: what the summary decides, and the shapes and devices it
/// leaves to the allocator.
#[test]
fn summary_declines_what_it_cannot_decide() {
    struct Case {
        name: &'static str,
        fixture: Fixture,
        want: NodeSummary,
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
            want: NodeSummary::Fits,
        },
        Case {
            name: "too few devices",
            fixture: fx(gpus(1), claim("ns", "c").request(req("r", "cls").count(2))),
            want: NodeSummary::Short { free: 1 },
        },
        Case {
            name: "matchAttribute, enough devices of one value",
            fixture: fx(
                gpus(2),
                claim("ns", "c")
                    .request(req("r", "cls").count(2))
                    .match_attribute(&format!("{DRIVER}/color"), &[]),
            ),
            want: NodeSummary::Fits,
        },
        Case {
            // Values are matched across the node's slices: two devices of colour 0, one per slice.
            name: "matchAttribute, one value over two slices of the node",
            fixture: Fixture {
                slices: vec![
                    slice("s", DRIVER, "n", "n")
                        .device(dev("d0").int("color", 0))
                        .device(dev("d1").int("color", 1))
                        .build(),
                    slice("s2", DRIVER, "n", "n2")
                        .device(dev("e0").int("color", 0))
                        .build(),
                ],
                classes: vec![class("cls", DRIVER)],
                claims: vec![
                    claim("ns", "c")
                        .request(req("r", "cls").count(2))
                        .match_attribute(&format!("{DRIVER}/color"), &[])
                        .build(),
                ],
                ..Default::default()
            },
            want: NodeSummary::Fits,
        },
        Case {
            // Three devices of colour 0, one of them allocated; two of colour 1: the largest free
            // group is two.
            name: "matchAttribute, an allocated device leaves its group",
            fixture: Fixture {
                slices: vec![
                    slice("s", DRIVER, "n", "n")
                        .device(dev("d0").int("color", 0))
                        .device(dev("d1").int("color", 0))
                        .device(dev("d2").int("color", 0))
                        .device(dev("d3").int("color", 1))
                        .device(dev("d4").int("color", 1))
                        .build(),
                ],
                classes: vec![class("cls", DRIVER)],
                claims: vec![
                    claim("ns", "c")
                        .request(req("r", "cls").count(3))
                        .match_attribute(&format!("{DRIVER}/color"), &[])
                        .build(),
                ],
                allocated: vec![allocated(
                    claim("ns", "other").build(),
                    one_device_allocation(DRIVER, "n", "d1"),
                )],
                ..Default::default()
            },
            want: NodeSummary::Short { free: 2 },
        },
        Case {
            name: "matchAttribute, the free devices differ",
            fixture: fx(
                slice("s", DRIVER, "n", "n")
                    .device(dev("d0").int("color", 0))
                    .device(dev("d1").int("color", 1))
                    .device(dev("d2")),
                claim("ns", "c")
                    .request(req("r", "cls").count(2))
                    .match_attribute(&format!("{DRIVER}/color"), &["r"]),
            ),
            want: NodeSummary::Short { free: 1 },
        },
        Case {
            name: "matchAttribute over a list attribute",
            fixture: fx(
                slice("s", DRIVER, "n", "n")
                    .device(dev("d0").ints("numa", &[0, 1]))
                    .device(dev("d1").ints("numa", &[1])),
                claim("ns", "c")
                    .request(req("r", "cls").count(2))
                    .match_attribute(&format!("{DRIVER}/numa"), &[]),
            ),
            want: NodeSummary::Undecided,
        },
        Case {
            name: "distinctAttribute",
            fixture: fx(
                gpus(2),
                claim("ns", "c")
                    .request(req("r", "cls"))
                    .distinct_attribute(&format!("{DRIVER}/color"), &[]),
            ),
            want: NodeSummary::Undecided,
        },
        Case {
            name: "two constraints",
            fixture: fx(
                gpus(2),
                claim("ns", "c")
                    .request(req("r", "cls"))
                    .match_attribute(&format!("{DRIVER}/color"), &[])
                    .match_attribute(&format!("{DRIVER}/color"), &[]),
            ),
            want: NodeSummary::Undecided,
        },
        Case {
            name: "all mode",
            fixture: fx(gpus(2), claim("ns", "c").request(req("r", "cls").all())),
            want: NodeSummary::Undecided,
        },
        Case {
            name: "two requests",
            fixture: fx(
                gpus(2),
                claim("ns", "c").request(req("a", "cls")).request(req("b", "cls")),
            ),
            want: NodeSummary::Undecided,
        },
        Case {
            name: "first available",
            fixture: fx(
                gpus(2),
                claim("ns", "c").request(first_available("r", vec![req("x", "cls")])),
            ),
            want: NodeSummary::Undecided,
        },
        Case {
            name: "admin access",
            fixture: fx(gpus(2), claim("ns", "c").request(req("r", "cls").admin())),
            want: NodeSummary::Undecided,
        },
        Case {
            name: "capacity request",
            fixture: fx(
                slice("s", DRIVER, "n", "n").device(dev("d0").cap("units", "4")),
                claim("ns", "c").request(req("r", "cls").capacity("units", "1")),
            ),
            want: NodeSummary::Undecided,
        },
        Case {
            name: "shared counters on the node",
            fixture: fx(
                gpus(2).counter_set("cs", &[("c", "2")]),
                claim("ns", "c").request(req("r", "cls")),
            ),
            want: NodeSummary::Undecided,
        },
        Case {
            name: "a slice for all nodes",
            fixture: fx(
                slice("s", DRIVER, "", "shared").all_nodes().device(dev("d0")),
                claim("ns", "c").request(req("r", "cls")),
            ),
            want: NodeSummary::Undecided,
        },
        Case {
            name: "only another node's slice",
            fixture: fx(
                slice("s", DRIVER, "other", "other").device(dev("d0")),
                claim("ns", "c").request(req("r", "cls")),
            ),
            want: NodeSummary::Short { free: 0 },
        },
        Case {
            name: "multi-allocatable device",
            fixture: fx(
                slice("s", DRIVER, "n", "n").device(dev("d0").multi()),
                claim("ns", "c").request(req("r", "cls")),
            ),
            want: NodeSummary::Undecided,
        },
        Case {
            name: "tainted device",
            fixture: fx(
                slice("s", DRIVER, "n", "n").device(dev("d0").taint("k", "v", "NoSchedule")),
                claim("ns", "c").request(req("r", "cls")),
            ),
            want: NodeSummary::Undecided,
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
            want: NodeSummary::Undecided,
        },
    ];
    for c in cases {
        let alloc = c.fixture.allocator().unwrap();
        let claims: Vec<&PreparedClaim> = alloc.claims().iter().map(|c| &**c).collect();
        assert_eq!(alloc.summarize(&node("n"), &claims), c.want, "{}", c.name);
        assert_eq!(
            alloc.fits_without_search(&node("n"), &claims),
            c.want == NodeSummary::Fits,
            "{}",
            c.name
        );
        let full = alloc.allocate(&node("n"), Deadline::none());
        match c.want {
            NodeSummary::Fits => assert!(full.is_ok(), "{}: {full:?}", c.name),
            NodeSummary::Short { .. } => assert!(
                matches!(full, Err(AllocationError::Unschedulable(_))),
                "{}: {full:?}",
                c.name
            ),
            NodeSummary::Undecided => {}
        }
    }
}

/// More state layers using the node's pool than the summary keeps at hand: it falls back to
/// asking the layers per device, with the same answer.
#[test]
fn summary_with_many_layers() {
    let mut s = slice("s", DRIVER, "n", "n");
    for i in 0..6 {
        s = s.device(dev(&format!("d{i}")).int("color", 0));
    }
    let f = Fixture {
        slices: vec![s.build()],
        classes: vec![class("cls", DRIVER)],
        claims: vec![claim("ns", "c").request(req("r", "cls")).build()],
        ..Default::default()
    };
    let index = f.index();
    let prepared = f
        .allocator_with_index(Arc::clone(&index))
        .unwrap()
        .claims()
        .to_vec();
    let layer = |i: usize| {
        let mut st = AllocatedState::new();
        st.add_allocation(&one_device_allocation(DRIVER, "n", &format!("d{i}")));
        Arc::new(st)
    };
    for (layers, want) in [(5, true), (6, false), (2, true)] {
        let verdict = if want {
            NodeSummary::Fits
        } else {
            NodeSummary::Short { free: 0 }
        };
        let state = StateLayers::new((0..layers).map(layer).collect());
        let alloc = Allocator::new(Arc::clone(&index), state, prepared.clone(), f.features);
        let claims: Vec<&PreparedClaim> = alloc.claims().iter().map(|c| &**c).collect();
        assert_eq!(alloc.summarize(&node("n"), &claims), verdict, "{layers} layers");
        assert_eq!(
            alloc.allocate(&node("n"), Deadline::none()).is_ok(),
            want,
            "{layers} layers"
        );
    }
}

/// A selector list for which some device fails is not cached: every call evaluates again and
/// declines, and the allocator reports the error each time.
#[test]
fn summary_declines_again_after_a_cel_error() {
    let f = Fixture {
        slices: vec![
            slice("s", DRIVER, "n", "n")
                .device(dev("d0").boolean("healthy", true))
                .device(dev("d1"))
                .build(),
        ],
        classes: vec![class("cls", DRIVER)],
        claims: vec![
            claim("ns", "c")
                .request(req("r", "cls").selector(&format!("device.attributes[{DRIVER:?}].healthy")))
                .build(),
        ],
        ..Default::default()
    };
    let index = f.index();
    for _ in 0..2 {
        let alloc = f.allocator_with_index(Arc::clone(&index)).unwrap();
        let claims: Vec<&PreparedClaim> = alloc.claims().iter().map(|c| &**c).collect();
        assert_eq!(alloc.summarize(&node("n"), &claims), NodeSummary::Undecided);
        assert!(matches!(
            alloc.allocate(&node("n"), Deadline::none()),
            Err(AllocationError::Fatal(_))
        ));
    }
}
