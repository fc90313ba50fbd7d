//! Random operation sequences never lose or duplicate a pod. The claim event is narrowed, so these
//! sequences also exercise the pool index (in tests the queue checks every narrowed decision
//! against a walk of the whole pool, and `check_consistency` the index against the pool).

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use k8s_openapi::api::{core::v1::Pod, resource::v1::ResourceClaim};
use proptest::prelude::*;
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventObject, EventResource, QueuedPodInfo, QueueingHint,
    well_known,
};

use super::fakes::*;
use crate::{PodLocation, Requeued};

const CLAIM: ClusterEvent = ClusterEvent::new(
    EventResource::ResourceClaim,
    ActionType::UPDATE_OTHER,
    "ClaimUpdate",
);
const GATES: ClusterEvent = ClusterEvent::new(
    EventResource::Pod,
    ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
    "GatesEliminated",
);
const N: u8 = 8;

#[derive(Clone, Debug)]
enum Op {
    Add(u8, bool),
    Pop,
    Fail(usize, u8),
    Done(usize),
    Event(u8),
    Delete(u8),
    Update(u8),
    Activate(u8),
    Flush(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..N, any::<bool>()).prop_map(|(i, g)| Op::Add(i, g)),
        3 => Just(Op::Pop),
        3 => (0usize..4, 0u8..4).prop_map(|(i, k)| Op::Fail(i, k)),
        1 => (0usize..4).prop_map(Op::Done),
        3 => (0u8..6).prop_map(Op::Event),
        1 => (0..N).prop_map(Op::Delete),
        2 => (0..N).prop_map(Op::Update),
        1 => (0..N).prop_map(Op::Activate),
        2 => (0u64..400_000).prop_map(Op::Flush),
    ]
}

fn name(i: u8) -> String {
    format!("p{i}")
}

/// Pod `p{i}` uses claim `c{i % 2}`; a claim event named `all` concerns every pod.
fn claim_of_pod(pod: &Pod) -> String {
    let i: u8 = pod
        .metadata
        .name
        .as_deref()
        .and_then(|n| n[1..].parse().ok())
        .unwrap_or(0);
    format!("c{}", i % 2)
}

fn claim_event(name: &str) -> Option<EventObject> {
    let mut c = ResourceClaim::default();
    c.metadata.name = Some(name.into());
    Some(EventObject::ResourceClaim(Arc::new(c)))
}

fn claim_name(o: Option<&EventObject>) -> Option<&str> {
    match o {
        Some(EventObject::ResourceClaim(c)) => c.metadata.name.as_deref(),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
    #[test]
    fn never_loses_or_duplicates_a_pod(ops in proptest::collection::vec(op(), 1..80)) {
        let gates_hint = ClusterEventWithHint::with_hint(GATES, |_, _, new| Ok(match new {
            Some(EventObject::Pod(p)) if p.pod.spec.as_ref().and_then(|s| s.scheduling_gates.as_ref()).is_none_or(Vec::is_empty) => QueueingHint::Queue,
            _ => QueueingHint::Skip,
        }));
        let (q, clock) = queue(vec![
            fake("NodeFit", vec![node_hint(well_known::NODE_ADD)]),
            fake("Claims", vec![ClusterEventWithHint::with_hint(CLAIM, |pod, _, new| {
                Ok(match claim_name(new) {
                    Some("all") => QueueingHint::Queue,
                    Some(n) if n == claim_of_pod(pod) => QueueingHint::Queue,
                    _ => QueueingHint::Skip,
                })
            })
            .narrowed_by(
                |_, new| match claim_name(new) {
                    Some("all") => None,
                    n => Some(n.map(str::to_string).into_iter().collect()),
                },
                |pod| vec![claim_of_pod(pod)],
            )]),
            Arc::new(Gate { name: "SchedulingGates", by_gates: true, events: vec![gates_hint] }),
        ]);
        // Model: pods that must be queued or in flight, pods done, pods deleted for good.
        let mut alive: BTreeSet<u8> = BTreeSet::new();
        let mut done: BTreeSet<u8> = BTreeSet::new();
        let mut ever: BTreeSet<u8> = BTreeSet::new();
        let mut flight: Vec<(u8, QueuedPodInfo)> = Vec::new();
        let mut flip = false;
        for op in ops {
            match op {
                Op::Add(i, gated) => {
                    if ever.insert(i) {
                        let p = if gated { gated_pod(&name(i)) } else { pod(&name(i), i32::from(i % 3)) };
                        prop_assert!(q.add(p));
                        alive.insert(i);
                    }
                }
                Op::Pop => {
                    if let Some(p) = q.try_pop() {
                        let i: u8 = p.pod_info.name[1..].parse().unwrap_or(u8::MAX);
                        prop_assert!(alive.contains(&i), "popped a pod that should not exist: {}", p.pod_info.name);
                        prop_assert!(!flight.iter().any(|(j, _)| *j == i), "popped twice");
                        flight.push((i, p));
                    }
                }
                Op::Fail(k, kind) => {
                    if !flight.is_empty() {
                        let (i, qpi) = flight.remove(k % flight.len());
                        let r = match kind {
                            0 => fail(&q, qpi, &[], &[]),
                            1 => fail(&q, qpi, &["NodeFit"], &[]),
                            2 => fail(&q, qpi, &[], &["Claims"]),
                            _ => fail(&q, qpi, &["NodeFit"], &["Claims"]),
                        };
                        if alive.contains(&i) {
                            prop_assert!(matches!(r, Requeued::To(_)), "{r:?}");
                        } else {
                            prop_assert!(matches!(r, Requeued::Dropped(_)), "{r:?}");
                        }
                    }
                }
                Op::Done(k) => {
                    if !flight.is_empty() {
                        let (i, qpi) = flight.remove(k % flight.len());
                        q.done(&qpi.pod_info.uid);
                        if alive.remove(&i) {
                            done.insert(i);
                        }
                    }
                }
                Op::Event(k) => {
                    match k {
                        0 => q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, node("n", true)),
                        1 => q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, node("n", false)),
                        2 => q.move_all_to_active_or_backoff(CLAIM, None, None),
                        3 => q.move_all_to_active_or_backoff(CLAIM, None, claim_event("c0")),
                        4 => q.move_all_to_active_or_backoff(CLAIM, None, claim_event("c1")),
                        5 => q.move_all_to_active_or_backoff(CLAIM, None, claim_event("all")),
                        _ => q.move_all_to_active_or_backoff(well_known::NODE_DELETE, None, None),
                    };
                }
                Op::Delete(i) => {
                    q.delete(&pod(&name(i), 0));
                    alive.remove(&i);
                    done.remove(&i);
                }
                Op::Update(i) => {
                    if alive.contains(&i) {
                        // Toggle a label and drop any scheduling gate.
                        flip = !flip;
                        q.update(None, labeled(&pod(&name(i), i32::from(i % 3)), "v", if flip { "a" } else { "b" }));
                    }
                }
                Op::Activate(i) => q.activate([format!("default/{}", name(i)).as_str()]),
                Op::Flush(ms) => {
                    clock.advance(Duration::from_millis(ms));
                    q.flush_backoff_completed();
                    q.flush_unschedulable_leftover();
                }
            }
            if let Err(e) = q.check_consistency() {
                prop_assert!(false, "{e}");
            }
            let in_flight: BTreeSet<u8> = flight.iter().map(|(i, _)| *i).filter(|i| alive.contains(i)).collect();
            for i in 0..N {
                let loc = q.location(&uid(&name(i)));
                if in_flight.contains(&i) {
                    prop_assert_eq!(loc, Some(PodLocation::InFlight), "p{}", i);
                } else if alive.contains(&i) {
                    prop_assert!(
                        matches!(loc, Some(PodLocation::Active | PodLocation::Backoff | PodLocation::Unschedulable | PodLocation::Gated)),
                        "p{} is {:?}", i, loc
                    );
                } else if done.contains(&i) {
                    prop_assert_eq!(loc, Some(PodLocation::Done), "p{}", i);
                } else {
                    prop_assert_eq!(loc, None, "p{}", i);
                }
            }
            let p = q.pending_pods();
            prop_assert_eq!(p.active + p.backoff + p.unschedulable + p.gated + p.in_flight, alive.len());
        }
        // Drain: everything alive can eventually be popped after enough time and a wildcard flush.
        for (_, qpi) in flight.drain(..) {
            q.done(&qpi.pod_info.uid);
        }
        for i in 0..N {
            if alive.contains(&i) {
                // Remove gates so that nothing stays gated forever.
                q.update(None, pod(&name(i), 0));
            }
        }
        clock.advance(Duration::from_secs(3600));
        q.flush_unschedulable_leftover();
        q.flush_backoff_completed();
        let mut popped = BTreeSet::new();
        while let Some(p) = q.try_pop() {
            prop_assert!(popped.insert(p.pod_info.name.clone()), "duplicate pop");
        }
        let done_count = alive.iter().filter(|i| q.location(&uid(&name(**i))) == Some(PodLocation::Done)).count();
        prop_assert_eq!(popped.len() + done_count, alive.len());
    }
}
