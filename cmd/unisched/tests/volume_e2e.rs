//! End-to-end volume tests of the real binary: `unisched sim <scenario> -o json` on the embedded
//! control plane (with its PV controller and provisioner) and the real runtime, asserting
//! placements, claim bindings and upstream reasons. Fixtures live in `e2e/scenarios/volumes/`.
//!
//! * A local PV (WaitForFirstConsumer, no provisioner) on one node of three pulls the pod there,
//!   and the claim ends Bound to that PV.
//! * A provisioned class restricted by `allowedTopologies`: the scheduler picks the allowed node,
//!   annotates the claim with it, and the provisioner's PV gets bound.
//! * A missing claim: the pod stays Pending with the API server's NotFound text as the reason.
//! * Two claims, one PV: the scheduler's assumed binding keeps the second pod from taking the PV.
//! * An Immediate claim bound by the PV controller to a zonal PV: VolumeZone keeps the pod in the
//!   PV's zone.
//! * A CSINode attach limit of one: the second pod on the node waits (NodeVolumeLimits).
//! * A ReadWriteOncePod claim in use: a second user waits everywhere (VolumeRestrictions).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../e2e/scenarios/volumes")
        .join(name)
}

fn run(name: &str) -> Value {
    let (v, code) = sim_json(&[&scenario(name)], &["--timeout", "60"]);
    assert_eq!(code, 0, "scenario {name} did not settle: {v}");
    v
}

fn pod<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("pod {name} not in report: {v}"))
}

fn claim<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["volumeClaims"]
        .as_array()
        .unwrap_or_else(|| panic!("no volumeClaims in report: {v}"))
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("claim {name} not in report: {v}"))
}

#[test]
fn local_pv_pulls_the_pod_to_its_node() {
    let v = run("local-pv");
    assert_eq!(pod(&v, "db")["node"], "n2", "{v}");
    let c = claim(&v, "data");
    assert_eq!(c["phase"], "Bound", "{v}");
    assert_eq!(c["volume"], "local-pv-n2", "{v}");
    // Static binding: no provisioning was asked for.
    assert!(c["selectedNode"].is_null(), "{v}");
}

#[test]
fn delayed_provisioning_selects_an_allowed_node() {
    let v = run("provisioned");
    assert_eq!(pod(&v, "worker")["node"], "n3", "{v}");
    let c = claim(&v, "scratch");
    assert_eq!(c["selectedNode"], "n3", "{v}");
    assert_eq!(c["phase"], "Bound", "{v}");
    assert!(
        c["volume"].as_str().is_some_and(|s| s.starts_with("pvc-")),
        "provisioned PV expected: {v}"
    );
}

#[test]
fn missing_claim_keeps_the_pod_pending_with_upstream_reason() {
    let v = run("missing-claim");
    let p = pod(&v, "orphan");
    assert!(p["node"].is_null(), "{v}");
    assert_eq!(p["reason"], "Unschedulable", "{v}");
    let message = p["message"].as_str().unwrap();
    assert!(
        message.starts_with("0/3 nodes are available: persistentvolumeclaim \"missing\" not found."),
        "{message}"
    );
}

#[test]
fn an_assumed_binding_is_not_handed_out_twice() {
    let v = run("one-pv-two-claims");
    let (a, b) = (pod(&v, "a"), pod(&v, "b"));
    let (winner, loser) = if a["node"].is_null() { ("b", a) } else { ("a", b) };
    assert_eq!(pod(&v, winner)["node"], "n2", "{v}");
    assert!(loser["node"].is_null(), "{v}");
    // The filter part is VolumeBinding's; what preemption adds is DefaultPreemption's business.
    let message = loser["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "0/3 nodes are available: 3 node(s) didn't find available persistent volumes to bind. preemption:"
        ),
        "{message}"
    );
    let won = claim(&v, &format!("data-{winner}"));
    assert_eq!(won["phase"], "Bound", "{v}");
    assert_eq!(won["volume"], "local-pv-n2", "{v}");
    let lost_name = format!("data-{}", if winner == "a" { "b" } else { "a" });
    assert_eq!(claim(&v, &lost_name)["phase"], "Pending", "{v}");
}

#[test]
fn immediate_claim_in_a_zone_keeps_the_pod_there() {
    let v = run("zonal-pv");
    assert_eq!(pod(&v, "app")["node"], "n3", "{v}");
    let c = claim(&v, "zonal");
    assert_eq!(c["phase"], "Bound", "{v}");
    assert_eq!(c["volume"], "zonal-pv", "{v}");
}

#[test]
fn csi_attach_limit_is_enforced() {
    let v = run("csi-limits");
    let (a, b) = (pod(&v, "a"), pod(&v, "b"));
    let (placed, waiting) = if a["node"].is_null() { (b, a) } else { (a, b) };
    assert_eq!(placed["node"], "n1", "{v}");
    assert!(waiting["node"].is_null(), "{v}");
    let message = waiting["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "0/3 nodes are available: 1 node(s) exceed max volume count, \
             2 node(s) didn't match Pod's node affinity/selector. preemption:"
        ),
        "{message}"
    );
}

#[test]
fn read_write_once_pod_claim_has_one_user() {
    let v = run("read-write-once-pod");
    assert!(pod(&v, "first")["node"].is_string(), "{v}");
    let second = pod(&v, "second");
    assert!(second["node"].is_null(), "{v}");
    let message = second["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "0/3 nodes are available: 3 node(s) unavailable due to PersistentVolumeClaim with \
             ReadWriteOncePod access mode already in-use by another pod. preemption:"
        ),
        "{message}"
    );
}
