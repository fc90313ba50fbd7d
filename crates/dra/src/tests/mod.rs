//! Table-driven allocator tests, one table per concern, each in its own module; this module
//! holds the table harness (cases, expectations, the shared GPU fixtures) they all use.

mod capacity;
mod cel_errors;
mod constraints;
mod counters;
mod drivers;
mod fast_path;
mod pools;
mod props;
mod requests;
mod results;
mod search;
mod taints;

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
