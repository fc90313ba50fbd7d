//! Property tests: random slices, classes and claims. Whatever the allocator returns must never
//! allocate a non-shareable device twice, overdraw a counter or a capacity, or violate a
//! constraint; and the same input gives the same output.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim};
use proptest::prelude::*;
use unisched_resource::Quantity;

use crate::AllocationError;
use crate::testing::*;

const DRIVER: &str = "drv.example.com";

#[derive(Clone, Debug)]
struct DevSpec {
    numa: i64,
    color: u8,
    multi: bool,
    cap: i64,
    counter: Option<i64>,
}

#[derive(Clone, Debug)]
struct ReqSpec {
    count: u8,
    all: bool,
    color: Option<u8>,
    capacity: Option<i64>,
    admin: bool,
}

#[derive(Clone, Debug)]
struct ClaimSpec {
    requests: Vec<ReqSpec>,
    match_numa: bool,
    distinct_color: bool,
}

#[derive(Clone, Debug)]
struct Scenario {
    devices: Vec<DevSpec>,
    counter_total: i64,
    claims: Vec<ClaimSpec>,
    preallocated: Vec<usize>,
}

fn dev_spec() -> impl Strategy<Value = DevSpec> {
    (0..3i64, 0..2u8, any::<bool>(), 1..6i64, prop::option::of(1..3i64)).prop_map(
        |(numa, color, multi, cap, counter)| DevSpec {
            numa,
            color,
            multi,
            cap,
            counter,
        },
    )
}

fn req_spec() -> impl Strategy<Value = ReqSpec> {
    (
        1..3u8,
        prop::bool::weighted(0.1),
        prop::option::of(0..2u8),
        prop::option::of(1..4i64),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(count, all, color, capacity, admin)| ReqSpec {
            count,
            all,
            color,
            capacity,
            admin,
        })
}

fn claim_spec() -> impl Strategy<Value = ClaimSpec> {
    (
        prop::collection::vec(req_spec(), 1..3),
        prop::bool::weighted(0.3),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(requests, match_numa, distinct_color)| ClaimSpec {
            requests,
            match_numa,
            distinct_color,
        })
}

fn scenario() -> impl Strategy<Value = Scenario> {
    (
        prop::collection::vec(dev_spec(), 0..12),
        2..10i64,
        prop::collection::vec(claim_spec(), 1..4),
        prop::collection::vec(0..12usize, 0..3),
    )
        .prop_map(|(devices, counter_total, claims, preallocated)| Scenario {
            devices,
            counter_total,
            claims,
            preallocated,
        })
}

fn build(s: &Scenario) -> Fixture {
    let mut devices = slice("devs", DRIVER, "n", "p").count(2);
    for (i, d) in s.devices.iter().enumerate() {
        let mut b = dev(&format!("d{i}"))
            .int("numa", d.numa)
            .int("color", i64::from(d.color))
            .cap("units", &d.cap.to_string());
        if d.multi {
            b = b.multi();
        }
        if let Some(c) = d.counter {
            b = b.consumes("cs", &[("c", &c.to_string())]);
        }
        devices = devices.device(b);
    }
    let counters = slice("counters", DRIVER, "n", "p")
        .count(2)
        .counter_set("cs", &[("c", &s.counter_total.to_string())]);
    let mut claims = Vec::new();
    for (ci, c) in s.claims.iter().enumerate() {
        let mut cb = claim("ns", &format!("c{ci}"));
        for (ri, r) in c.requests.iter().enumerate() {
            let mut rb = req(&format!("r{ri}"), "cls").count(i64::from(r.count));
            if r.all {
                rb = rb.all();
            }
            if let Some(color) = r.color {
                rb = rb.selector(&format!("device.attributes[{DRIVER:?}].color == {color}"));
            }
            if let Some(cap) = r.capacity {
                rb = rb.capacity("units", &cap.to_string());
            }
            if r.admin {
                rb = rb.admin();
            }
            cb = cb.request(rb);
        }
        if c.match_numa {
            cb = cb.match_attribute(&format!("{DRIVER}/numa"), &[]);
        }
        if c.distinct_color {
            cb = cb.distinct_attribute(&format!("{DRIVER}/color"), &[]);
        }
        claims.push(cb.build());
    }
    let mut f = Fixture {
        slices: vec![devices.build(), counters.build()],
        classes: vec![class("cls", DRIVER)],
        claims,
        ..Default::default()
    };
    // Pre-allocate some exclusive devices (only ones that do not allow sharing, and only if the
    // counters allow it, so that the starting state is itself consistent).
    let mut used_counter = 0;
    for &i in &s.preallocated {
        let Some(d) = s.devices.get(i) else { continue };
        if d.multi
            || f.allocated
                .iter()
                .any(|c| device_names(alloc_of(c)).contains(&format!("d{i}")))
        {
            continue;
        }
        let need = d.counter.unwrap_or(0);
        if used_counter + need > s.counter_total {
            continue;
        }
        used_counter += need;
        let a = allocated(
            claim("ns", &format!("pre{i}")).build(),
            result_of(&format!("d{i}")),
        );
        f.allocated.push(a);
    }
    f
}

fn alloc_of(c: &ResourceClaim) -> &AllocationResult {
    c.status.as_ref().and_then(|s| s.allocation.as_ref()).unwrap()
}

fn result_of(device: &str) -> AllocationResult {
    one_device_allocation(DRIVER, "p", device)
}

fn check_invariants(s: &Scenario, f: &Fixture, results: &[AllocationResult]) -> Result<(), TestCaseError> {
    let dev_index = |name: &str| name.trim_start_matches('d').parse::<usize>().ok();
    // Exclusive use (admin access excluded) across pre-allocated and new results.
    let mut exclusive: HashMap<String, usize> = HashMap::new();
    let mut capacity_used: BTreeMap<usize, i64> = BTreeMap::new();
    let mut counter_devices: BTreeMap<usize, ()> = BTreeMap::new();
    let all: Vec<&AllocationResult> = f.allocated.iter().map(alloc_of).chain(results.iter()).collect();
    for a in &all {
        for r in a.devices.iter().flat_map(|d| d.results.iter().flatten()) {
            let i = dev_index(&r.device).ok_or_else(|| TestCaseError::fail("bad device name"))?;
            let d = &s.devices[i];
            if r.admin_access != Some(true) {
                counter_devices.insert(i, ());
            }
            if r.admin_access == Some(true) {
                continue;
            }
            if d.multi {
                prop_assert!(r.share_id.is_some(), "shared device without share id");
                let used = r
                    .consumed_capacity
                    .as_ref()
                    .and_then(|m| m.get("units"))
                    .map(|q| Quantity::from_api(q).unwrap().value())
                    .unwrap_or(0);
                *capacity_used.entry(i).or_default() += used;
            } else {
                let n = exclusive.entry(r.device.clone()).or_default();
                *n += 1;
                prop_assert!(*n == 1, "device {} allocated twice", r.device);
            }
        }
    }
    for (i, used) in &capacity_used {
        prop_assert!(
            *used <= s.devices[*i].cap,
            "capacity of d{i} overdrawn: {used} > {}",
            s.devices[*i].cap
        );
    }
    let counters: i64 = counter_devices
        .keys()
        .map(|i| s.devices[*i].counter.unwrap_or(0))
        .sum();
    prop_assert!(
        counters <= s.counter_total,
        "counters overdrawn: {counters} > {}",
        s.counter_total
    );

    // Constraints and request shapes.
    for (ci, (c, a)) in s.claims.iter().zip(results).enumerate() {
        let rs: Vec<_> = a
            .devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .collect();
        let devs: Vec<&DevSpec> = rs
            .iter()
            .map(|r| &s.devices[dev_index(&r.device).unwrap_or(0)])
            .collect();
        if c.match_numa && !devs.is_empty() {
            prop_assert!(
                devs.iter().all(|d| d.numa == devs[0].numa),
                "claim c{ci}: matchAttribute violated"
            );
        }
        if c.distinct_color {
            let mut colors: Vec<u8> = devs.iter().map(|d| d.color).collect();
            colors.sort();
            let before = colors.len();
            colors.dedup();
            prop_assert!(colors.len() == before, "claim c{ci}: distinctAttribute violated");
        }
        for (ri, r) in c.requests.iter().enumerate() {
            let mine: Vec<_> = rs.iter().filter(|x| x.request == format!("r{ri}")).collect();
            if !r.all {
                prop_assert_eq!(mine.len(), usize::from(r.count));
            } else {
                prop_assert!(!mine.is_empty());
            }
            for m in mine {
                let d = &s.devices[dev_index(&m.device).unwrap_or(0)];
                if let Some(color) = r.color {
                    prop_assert_eq!(d.color, color);
                }
                prop_assert_eq!(m.admin_access == Some(true), r.admin);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn allocation_invariants(s in scenario()) {
        let f = build(&s);
        let first = f.allocate(&node("n"));
        match &first {
            Ok(results) => {
                prop_assert_eq!(results.len(), s.claims.len());
                check_invariants(&s, &f, results)?;
            }
            Err(AllocationError::Unschedulable(_)) => {}
            // An `All` request whose constraint its own devices break is an error, as upstream.
            Err(AllocationError::Fatal(e)) if matches!(**e, crate::FatalError::AllModeConstraint { .. }) => {
                prop_assert!(s.claims.iter().any(|c| c.requests.iter().any(|r| r.all)));
            }
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
        // Deterministic: a fresh index, engine and allocator give the same answer.
        let again = build(&s).allocate(&node("n"));
        prop_assert_eq!(first, again);
    }
}
