//! The gang-preemption workloads (`e2e/perf/workload-preemption.yaml`, upstream's
//! workload_preemption scheduler_perf cases) at smoke sizes: every preemptor pod is bound, and
//! every lower-priority pod it had to make room for was deleted (once: a group that preempted again
//! for victims already deleted would show as failed deletions), in engine mode and through the
//! runtime on the embedded control plane.
//!
//! At these sizes every preemptor pod needs a whole node and lands on a distinct one, and the
//! nodes hold no room it could use without evicting all that runs there (the anchors of
//! GangPreemptionAffinity, of higher priority, excepted): the victims are every pod of the
//! low-priority namespace, `gang-preempt-1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use unisched_bench::{Catalog, Mode, Op, RunOptions, RunReport, Workload};

const CASES: [&str; 3] = [
    "GangPreemptionBasic",
    "GangPreemptionPodGroups",
    "GangPreemptionAffinity",
];

/// The pods the workload creates in the low-priority namespace.
fn low_priority_pods(w: &Workload) -> u64 {
    w.ops
        .iter()
        .map(|op| match op {
            Op::CreatePods {
                count,
                namespace: Some(ns),
                ..
            } if ns == "gang-preempt-1" => *count as u64,
            _ => 0,
        })
        .sum()
}

fn writes(r: &RunReport, key: &str) -> f64 {
    r.api_writes.by_resource.get(key).copied().unwrap_or(0.0)
}

fn check_preempted(name: &str, mode: Mode) {
    let catalog = Catalog::embedded().unwrap();
    let w = catalog.workload(name, true).unwrap();
    let r = unisched_bench::run(&w, mode, &RunOptions::default()).unwrap();
    let ctx = serde_json::to_string_pretty(&r).unwrap();
    let victims = low_priority_pods(&w);
    assert!(victims > 0, "{name}: no low-priority pods");
    assert!(!r.timed_out, "{name} [{mode:?}] timed out: {ctx}");
    assert!(r.measured_pods > 0, "{name}: {ctx}");
    assert_eq!(r.undecided, 0, "{name} [{mode:?}]: {ctx}");
    assert_eq!(r.unschedulable, 0, "{name} [{mode:?}]: {ctx}");
    assert_eq!(
        r.scheduled, r.measured_pods,
        "{name} [{mode:?}]: not every preemptor pod bound: {ctx}"
    );
    assert_eq!(
        writes(&r, "delete pods"),
        victims as f64,
        "{name} [{mode:?}]: every low-priority pod evicted, and nothing else: {ctx}"
    );
    assert!(
        writes(&r, "patch pods/status") >= victims as f64,
        "{name} [{mode:?}]: each victim marked DisruptionTarget: {ctx}"
    );
    assert_eq!(r.api_writes.failed, 0.0, "{name} [{mode:?}]: {ctx}");
}

#[test]
fn every_gang_preemption_workload_evicts_and_binds_in_engine_mode() {
    let catalog = Catalog::embedded().unwrap();
    let names: Vec<String> = CASES.iter().flat_map(|case| catalog.select(case)).collect();
    assert_eq!(names.len(), 9, "{names:?}");
    for name in &names {
        check_preempted(name, Mode::Engine);
    }
}

#[test]
fn every_gang_preemption_workload_evicts_and_binds_through_the_runtime() {
    let catalog = Catalog::embedded().unwrap();
    for case in CASES {
        for name in catalog.select(case) {
            check_preempted(&name, Mode::Full);
        }
    }
}
