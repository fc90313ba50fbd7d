//! Queueing hints, pending plugins, gating and in-flight event replay.

use std::sync::{
    Arc,
    atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst},
};

use k8s_openapi::api::core::v1::{Container, PodAffinity, PodAffinityTerm, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::LabelSelector};
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, EventObject, EventResource, QueueingHint, well_known,
};

use super::fakes::*;
use crate::{PodLocation, Requeued};

const CLAIM_UPDATE: ClusterEvent = ClusterEvent::new(
    EventResource::ResourceClaim,
    ActionType::UPDATE_OTHER,
    "resource.k8s.io/ResourceClaimUpdate",
);
const CLAIM_ADD: ClusterEvent = ClusterEvent::new(
    EventResource::ResourceClaim,
    ActionType::ADD,
    "resource.k8s.io/ResourceClaimAdd",
);
const SLICE_ADD: ClusterEvent = ClusterEvent::new(
    EventResource::ResourceSlice,
    ActionType::ADD,
    "resource.k8s.io/ResourceSliceAdd",
);
const GATES_ELIMINATED: ClusterEvent = ClusterEvent::new(
    EventResource::Pod,
    ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
    "PodUpdatePodSchedulingGatesEliminated",
);

fn scheduling_gates() -> Arc<dyn unisched_framework::Plugin> {
    Arc::new(Gate {
        name: "SchedulingGates",
        by_gates: true,
        events: vec![ClusterEventWithHint::with_hint(
            GATES_ELIMINATED,
            |_, _, new| match new {
                Some(EventObject::Pod(p)) => Ok(
                    if p.pod
                        .spec
                        .as_ref()
                        .and_then(|s| s.scheduling_gates.as_ref())
                        .is_none_or(Vec::is_empty)
                    {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::Skip
                    },
                ),
                _ => Ok(QueueingHint::Skip),
            },
        )],
    })
}

/// Puts a fresh pod into the unschedulable pool, rejected by `unschedulable` / `pending`.
fn rejected(q: &crate::SchedulingQueue, name: &str, unschedulable: &[&str], pending: &[&str]) {
    q.add(pod(name, 0));
    let qpi = pop_named(q, name);
    assert_eq!(
        fail(q, qpi, unschedulable, pending),
        Requeued::To(PodLocation::Unschedulable)
    );
}

#[test]
fn hints_decide_skip_or_queue() {
    let hint_error = ClusterEventWithHint::with_hint(SLICE_ADD, |_, _, _| Err("boom".into()));
    let plugins = vec![
        fake("NodeFit", vec![node_hint(well_known::NODE_ADD)]),
        fake("Other", vec![ev(CLAIM_ADD)]),
        fake("Broken", vec![hint_error]),
    ];
    struct Case {
        name: &'static str,
        rejector: &'static str,
        event: ClusterEvent,
        new: Option<EventObject>,
        want: PodLocation,
    }
    let cases = [
        Case {
            name: "hint skips",
            rejector: "NodeFit",
            event: well_known::NODE_ADD,
            new: node("n", false),
            want: PodLocation::Unschedulable,
        },
        Case {
            name: "hint queues",
            rejector: "NodeFit",
            event: well_known::NODE_ADD,
            new: node("n", true),
            want: PodLocation::Backoff,
        },
        Case {
            name: "not a rejector's event",
            rejector: "NodeFit",
            event: CLAIM_ADD,
            new: None,
            want: PodLocation::Unschedulable,
        },
        Case {
            name: "no hint means queue",
            rejector: "Other",
            event: CLAIM_ADD,
            new: None,
            want: PodLocation::Backoff,
        },
        Case {
            name: "hint error means queue",
            rejector: "Broken",
            event: SLICE_ADD,
            new: None,
            want: PodLocation::Backoff,
        },
        Case {
            name: "other plugin's hint ignored",
            rejector: "Other",
            event: well_known::NODE_ADD,
            new: node("n", true),
            want: PodLocation::Unschedulable,
        },
        Case {
            name: "wildcard moves everyone",
            rejector: "NodeFit",
            event: well_known::UNSCHEDULABLE_TIMEOUT,
            new: None,
            want: PodLocation::Backoff,
        },
        Case {
            name: "NodeAdd does not imply a taint update",
            rejector: "NodeFit",
            event: ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_TAINT, "NodeTaint"),
            new: node("n", true),
            want: PodLocation::Unschedulable,
        },
        Case {
            name: "label update not registered",
            rejector: "NodeFit",
            event: ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_LABEL, "NodeLabel"),
            new: node("n", true),
            want: PodLocation::Unschedulable,
        },
    ];
    for c in cases {
        let (q, _clock) = queue(plugins.clone());
        rejected(&q, "p", &[c.rejector], &[]);
        q.move_all_to_active_or_backoff(c.event, None, c.new);
        assert_eq!(q.location(&uid("p")), Some(c.want), "{}", c.name);
        q.check_consistency().expect(c.name);
    }
}

#[test]
fn pending_plugin_queue_skips_backoff() {
    let plugins = vec![
        fake("Claims", vec![ev(CLAIM_UPDATE)]),
        fake("NodeFit", vec![node_hint(well_known::NODE_ADD)]),
    ];
    let cases: [(
        &str,
        &[&str],
        &[&str],
        ClusterEvent,
        Option<EventObject>,
        PodLocation,
    ); 5] = [
        (
            "pending + queue: active now",
            &[],
            &["Claims"],
            CLAIM_UPDATE,
            None,
            PodLocation::Active,
        ),
        (
            "rejected + queue: backoff",
            &["Claims"],
            &[],
            CLAIM_UPDATE,
            None,
            PodLocation::Backoff,
        ),
        (
            "mixed, pending queues",
            &["NodeFit"],
            &["Claims"],
            CLAIM_UPDATE,
            None,
            PodLocation::Active,
        ),
        (
            "mixed, only rejector queues",
            &["NodeFit"],
            &["Claims"],
            well_known::NODE_ADD,
            node("n", true),
            PodLocation::Backoff,
        ),
        (
            "mixed, nobody queues",
            &["NodeFit"],
            &["Claims"],
            well_known::NODE_ADD,
            node("n", false),
            PodLocation::Unschedulable,
        ),
    ];
    for (name, unsched, pending, event, new, want) in cases {
        let (q, _clock) = queue(plugins.clone());
        rejected(&q, "p", unsched, pending);
        q.move_all_to_active_or_backoff(event, None, new);
        assert_eq!(q.location(&uid("p")), Some(want), "{name}");
    }
}

#[test]
fn gated_pods_only_released_by_gating_plugin_events() {
    let claims_gate: Arc<dyn unisched_framework::Plugin> = Arc::new(Gate {
        name: "ClaimsGate",
        by_gates: false,
        events: vec![ev(CLAIM_ADD)],
    });
    let (q, clock) = queue(vec![
        scheduling_gates(),
        claims_gate,
        fake("NodeFit", vec![ev(well_known::NODE_ADD)]),
    ]);

    // spec.schedulingGates: only the gates-eliminated update releases it.
    let g = gated_pod("g");
    assert!(q.add(g.clone()));
    assert_eq!(q.location(&uid("g")), Some(PodLocation::Gated));
    assert_eq!(
        q.get(&uid("g")).and_then(|e| e.gating_plugin),
        Some("SchedulingGates".to_string())
    );
    assert!(q.try_pop().is_none());
    q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, None);
    q.move_all_to_active_or_backoff(CLAIM_ADD, None, None);
    clock.advance(10 * 60 * SEC);
    q.flush_unschedulable_leftover();
    q.flush_backoff_completed();
    assert_eq!(
        q.location(&uid("g")),
        Some(PodLocation::Gated),
        "no foreign event or timeout releases it"
    );
    let relabeled = labeled(&g, "x", "y");
    q.update(Some(&g), relabeled.clone());
    assert_eq!(
        q.location(&uid("g")),
        Some(PodLocation::Gated),
        "an unrelated update keeps it gated"
    );
    let ungated = with(&relabeled, |p| {
        if let Some(s) = p.spec.as_mut() {
            s.scheduling_gates = None;
        }
    });
    q.update(Some(&relabeled), ungated);
    assert_eq!(q.location(&uid("g")), Some(PodLocation::Active));

    // Gated by a PreEnqueue plugin that registered ResourceClaim/Add.
    let c = labeled(&pod("c", 0), "needs", "ClaimsGate");
    q.add(c.clone());
    assert_eq!(q.location(&uid("c")), Some(PodLocation::Gated));
    assert_eq!(q.pending_pods().gated, 1);
    q.move_all_to_active_or_backoff(CLAIM_ADD, None, None);
    assert_eq!(
        q.location(&uid("c")),
        Some(PodLocation::Gated),
        "the event re-ran PreEnqueue, which still refuses"
    );
    let fixed = with(&c, |p| p.metadata.labels = None);
    q.update(Some(&c), fixed);
    assert_eq!(
        q.location(&uid("c")),
        Some(PodLocation::Gated),
        "ClaimsGate registered no pod update"
    );
    q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, None);
    assert_eq!(q.location(&uid("c")), Some(PodLocation::Gated));
    q.move_all_to_active_or_backoff(CLAIM_ADD, None, None);
    assert_eq!(q.location(&uid("c")), Some(PodLocation::Active));
    assert_eq!(q.pending_pods().gated, 0);
    q.check_consistency().expect("consistent");
}

#[test]
fn pre_enqueue_runs_when_entering_backoff() {
    let (q, _clock) = queue(vec![
        scheduling_gates(),
        fake("NodeFit", vec![ev(well_known::NODE_ADD)]),
    ]);
    let p = pod("p", 0);
    q.add(p.clone());
    let qpi = pop_named(&q, "p");
    // The pod gains a scheduling gate while in flight, then fails.
    let gated = with(&p, |x| {
        if let Some(s) = x.spec.as_mut() {
            s.scheduling_gates = Some(vec![k8s_openapi::api::core::v1::PodSchedulingGate {
                name: "g".into(),
            }]);
        }
    });
    q.update(Some(&p), gated);
    assert_eq!(
        fail(&q, qpi, &["NodeFit"], &[]),
        Requeued::To(PodLocation::Unschedulable)
    );
    q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, None);
    assert_eq!(
        q.location(&uid("p")),
        Some(PodLocation::Gated),
        "PreEnqueue refused it on the way to backoffQ"
    );
}

#[test]
fn in_flight_events_are_replayed() {
    let plugins = vec![fake("NodeFit", vec![node_hint(well_known::NODE_ADD)])];
    let cases: [(&str, Option<Option<EventObject>>, PodLocation); 3] = [
        ("no event", None, PodLocation::Unschedulable),
        (
            "useless event",
            Some(node("n", false)),
            PodLocation::Unschedulable,
        ),
        ("useful event", Some(node("n", true)), PodLocation::Backoff),
    ];
    for (name, event, want) in cases {
        let (q, _clock) = queue(plugins.clone());
        q.add(pod("p", 0));
        let qpi = pop_named(&q, "p");
        if let Some(new) = event {
            q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, new);
            assert_eq!(q.in_flight_events(), 1, "{name}");
        }
        assert_eq!(fail(&q, qpi, &["NodeFit"], &[]), Requeued::To(want), "{name}");
        assert_eq!(q.in_flight_events(), 0, "{name}: garbage-collected");
    }
}

/// A failed pod-group cycle leaves the scheduler's own changes recorded so far out of its
/// members' replay (`forget_own_events_so_far`), never a cluster event: a victim's device freed
/// while the group was tried must still wake it.
#[test]
fn forgetting_own_events_keeps_cluster_events() {
    let plugins = vec![fake("NodeFit", vec![node_hint(well_known::NODE_ADD)])];
    // (case, useful events recorded before the forget: (own?), one after it?, where it goes)
    let cases: [(&str, &[bool], bool, PodLocation); 5] = [
        ("own change only", &[true], false, PodLocation::Unschedulable),
        ("cluster event only", &[false], false, PodLocation::Backoff),
        (
            "own change, then a cluster event",
            &[true, false],
            false,
            PodLocation::Backoff,
        ),
        (
            "cluster event, then an own change",
            &[false, true],
            false,
            PodLocation::Backoff,
        ),
        (
            "own change, and one after the forget",
            &[true],
            true,
            PodLocation::Backoff,
        ),
    ];
    for (name, before, after, want) in cases {
        let (q, _clock) = queue(plugins.clone());
        q.add(pod("p", 0));
        let qpi = pop_named(&q, "p");
        for own in before {
            if *own {
                q.move_all_for_own_change(well_known::NODE_ADD, None, node("n", true));
            } else {
                q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, node("n", true));
            }
        }
        q.forget_own_events_so_far([qpi.pod_info.uid.as_str()]);
        if after {
            q.move_all_for_own_change(well_known::NODE_ADD, None, node("n", true));
        }
        assert_eq!(fail(&q, qpi, &["NodeFit"], &[]), Requeued::To(want), "{name}");
        assert_eq!(q.in_flight_events(), 0, "{name}: garbage-collected");
        q.check_consistency().expect("consistent");
    }
}

#[test]
fn in_flight_events_only_after_the_pod_was_popped() {
    let (q, _clock) = queue(vec![fake("NodeFit", vec![node_hint(well_known::NODE_ADD)])]);
    q.add(pod("a", 1));
    q.add(pod("b", 0));
    let a = pop_named(&q, "a");
    q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, node("n1", true));
    let b = pop_named(&q, "b");
    q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, node("n2", false));
    assert_eq!(q.in_flight_events(), 2);
    assert_eq!(
        fail(&q, b, &["NodeFit"], &[]),
        Requeued::To(PodLocation::Unschedulable),
        "b started after the useful event"
    );
    assert_eq!(q.in_flight_events(), 2, "a still needs both");
    assert_eq!(fail(&q, a, &["NodeFit"], &[]), Requeued::To(PodLocation::Backoff));
    assert_eq!(q.in_flight_events(), 0);

    // done() garbage-collects too, oldest first.
    q.activate(["default/a", "default/b"]);
    let a = q.try_pop().expect("a");
    q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, None);
    let b = q.try_pop().expect("b");
    q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, None);
    q.done(&b.pod_info.uid);
    assert_eq!(q.in_flight_events(), 2);
    q.done(&a.pod_info.uid);
    assert_eq!(q.in_flight_events(), 0);
    q.check_consistency().expect("consistent");
}

#[test]
fn in_flight_update_is_recorded_and_newest_object_requeued() {
    let label_update = ClusterEvent::new(EventResource::Pod, ActionType::UPDATE_POD_LABEL, "PodLabel");
    let (q, _clock) = queue(vec![
        fake("Labels", vec![ev(label_update)]),
        fake("NodeFit", vec![]),
    ]);
    let p = pod("p", 0);
    q.add(p.clone());
    let qpi = pop_named(&q, "p");
    let newer = labeled(&p, "tier", "gold");
    q.update(Some(&p), newer);
    assert_eq!(q.location(&uid("p")), Some(PodLocation::InFlight));
    assert_eq!(
        fail(&q, qpi, &["Labels"], &[]),
        Requeued::To(PodLocation::Backoff)
    );
    let e = q.get(&uid("p")).expect("queued");
    assert_eq!(
        e.pod_info
            .pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("tier"))
            .map(String::as_str),
        Some("gold")
    );

    // The same update does not help a pod rejected by a plugin that ignores labels.
    let p2 = pod("p2", 0);
    q.add(p2.clone());
    let qpi = pop_named(&q, "p2");
    q.update(Some(&p2), labeled(&p2, "tier", "gold"));
    assert_eq!(
        fail(&q, qpi, &["NodeFit"], &[]),
        Requeued::To(PodLocation::Unschedulable)
    );
}

#[test]
fn unschedulable_pod_update_runs_hints_for_that_update() {
    let label_update = ClusterEvent::new(EventResource::Pod, ActionType::UPDATE_POD_LABEL, "PodLabel");
    let (q, _clock) = queue(vec![
        fake("Labels", vec![ev(label_update)]),
        fake("NodeFit", vec![]),
    ]);
    rejected(&q, "a", &["Labels"], &[]);
    rejected(&q, "b", &["NodeFit"], &[]);
    for n in ["a", "b"] {
        let old = q.get(&uid(n)).expect("queued").pod_info;
        q.update(Some(&old), labeled(&old, "x", "1"));
    }
    assert_eq!(q.location(&uid("a")), Some(PodLocation::Backoff));
    assert_eq!(q.location(&uid("b")), Some(PodLocation::Unschedulable));
    let b = q.get(&uid("b")).expect("queued");
    assert!(
        b.pod_info
            .pod
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key("x")),
        "stored object updated"
    );
}

#[test]
fn plugins_without_enqueue_extensions_get_every_event() {
    let (q, _clock) = queue(vec![Arc::new(NoExtensions("Legacy")), fake("NodeFit", vec![])]);
    rejected(&q, "p", &["Legacy"], &[]);
    assert_eq!(q.move_all_to_active_or_backoff(SLICE_ADD, None, None), 1);
    rejected(&q, "q", &["NodeFit"], &[]);
    assert_eq!(
        q.move_all_to_active_or_backoff(SLICE_ADD, None, None),
        0,
        "an empty registration wants nothing"
    );
}

fn with_cpu(p: &unisched_framework::PodInfo, cpu: &str) -> Arc<unisched_framework::PodInfo> {
    with(p, |x| {
        if let Some(s) = x.spec.as_mut() {
            s.node_name = Some("n1".into());
            s.containers = vec![Container {
                name: "c".into(),
                resources: Some(ResourceRequirements {
                    requests: Some([("cpu".to_string(), Quantity(cpu.into()))].into()),
                    ..Default::default()
                }),
                ..Default::default()
            }];
        }
    })
}

#[test]
fn assigned_pod_events_prefilter_by_affinity_and_spread() {
    let assigned_add = ClusterEvent::new(
        EventResource::AssignedPod,
        ActionType::ADD.or(ActionType::UPDATE_POD_LABEL),
        "AssignedPod",
    );
    let scale_down = ClusterEvent::new(
        EventResource::Pod,
        ActionType::UPDATE_POD_SCALE_DOWN,
        "PodScaleDown",
    );
    let (q, _clock) = queue(vec![
        fake("InterPodAffinity", vec![ev(assigned_add)]),
        fake("PodTopologySpread", vec![ev(assigned_add)]),
        fake("NodeResourcesFit", vec![ev(scale_down), ev(assigned_add)]),
    ]);
    let wants_web = with(&pod("w", 0), |p| {
        if let Some(s) = p.spec.as_mut() {
            s.affinity = Some(k8s_openapi::api::core::v1::Affinity {
                pod_affinity: Some(PodAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                        label_selector: Some(LabelSelector {
                            match_labels: Some([("app".to_string(), "web".to_string())].into()),
                            ..Default::default()
                        }),
                        topology_key: "zone".into(),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
    });
    q.add(wants_web);
    fail(&q, pop_named(&q, "w"), &["InterPodAffinity"], &[]);
    rejected(&q, "s", &["PodTopologySpread"], &[]);
    rejected(&q, "f", &["NodeResourcesFit"], &[]);

    let mut other_ns = raw_pod("db", 0);
    other_ns.metadata.namespace = Some("other".into());
    other_ns.metadata.labels = Some([("app".to_string(), "db".to_string())].into());
    q.assigned_pod_added(&Arc::new(unisched_framework::PodInfo::new(other_ns)));
    for n in ["w", "s", "f"] {
        assert_eq!(
            q.location(&uid(n)),
            Some(PodLocation::Unschedulable),
            "{n}: not a candidate"
        );
    }
    let web = labeled(&pod("web", 0), "app", "web");
    q.assigned_pod_added(&web);
    assert_eq!(
        q.location(&uid("w")),
        Some(PodLocation::Backoff),
        "affinity selects the new pod"
    );
    assert_eq!(
        q.location(&uid("s")),
        Some(PodLocation::Backoff),
        "spread counts pods in its namespace"
    );
    assert_eq!(
        q.location(&uid("f")),
        Some(PodLocation::Unschedulable),
        "fit is not a cross-topology plugin"
    );

    let big = with_cpu(&pod("big", 0), "2");
    let small = with_cpu(&big, "1");
    q.assigned_pod_updated(&big, &small);
    assert_eq!(
        q.location(&uid("f")),
        Some(PodLocation::Backoff),
        "a scale-down is offered to everyone"
    );
}

/// A PreEnqueue plugin that refuses every pod while `holding`, and counts its calls.
struct Switch {
    holding: AtomicBool,
    calls: AtomicUsize,
}
impl unisched_framework::Plugin for Switch {
    fn name(&self) -> &str {
        "Switch"
    }
    unisched_framework::serves!(as_pre_enqueue, as_enqueue_extensions);
}
impl unisched_framework::PreEnqueuePlugin for Switch {
    fn pre_enqueue(&self, _: &unisched_framework::PodInfo) -> unisched_framework::Status {
        self.calls.fetch_add(1, SeqCst);
        if self.holding.load(SeqCst) {
            unisched_framework::Status::unresolvable("switched off")
        } else {
            unisched_framework::Status::success()
        }
    }
}
impl unisched_framework::EnqueueExtensions for Switch {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![ev(CLAIM_ADD)]
    }
}

/// Counts what the queue reports: pods entering the pool, and PreEnqueue refusals.
#[derive(Debug, Default)]
struct Counting {
    into_pool: AtomicUsize,
    refusals: AtomicUsize,
}
impl crate::QueueObserver for Counting {
    fn incoming(&self, queue: &'static str, _: &str) {
        if queue == "unschedulable" {
            self.into_pool.fetch_add(1, SeqCst);
        }
    }
    fn gated(&self, _: &unisched_framework::PodInfo, _: &str, _: &str, _: &str) {
        self.refusals.fetch_add(1, SeqCst);
    }
}

#[test]
fn an_event_the_gate_still_refuses_leaves_the_pod_pooled_after_one_check() {
    use SeqCst;
    for pop_from_backoff in [true, false] {
        let gate = Arc::new(Switch {
            holding: true.into(),
            calls: 0.into(),
        });
        let seen = Arc::new(Counting::default());
        let (q, _clock) = queue_with(
            vec![gate.clone(), fake("NodeFit", vec![ev(well_known::NODE_ADD)])],
            |b| b.pop_from_backoff(pop_from_backoff).observer(seen.clone()),
        );
        q.add(pod("p", 0));
        assert_eq!(q.location(&uid("p")), Some(PodLocation::Gated));
        let (calls, pooled, refusals) = (
            gate.calls.load(SeqCst),
            seen.into_pool.load(SeqCst),
            seen.refusals.load(SeqCst),
        );

        assert_eq!(q.move_all_to_active_or_backoff(CLAIM_ADD, None, None), 0);
        assert_eq!(
            q.location(&uid("p")),
            Some(PodLocation::Gated),
            "pop_from_backoff={pop_from_backoff}"
        );
        assert_eq!(
            gate.calls.load(SeqCst),
            calls + 1,
            "the gate is asked once per event"
        );
        assert_eq!(
            seen.refusals.load(SeqCst),
            refusals + 1,
            "the refusal is reported again"
        );
        assert_eq!(
            seen.into_pool.load(SeqCst),
            pooled + 1,
            "counted as entering the pool, as upstream does"
        );
        assert_eq!(q.pending_pods().gated, 1);
        q.check_consistency().expect("consistent");

        q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, None);
        assert_eq!(
            gate.calls.load(SeqCst),
            calls + 1,
            "an event the gate did not register asks nobody"
        );

        gate.holding.store(false, SeqCst);
        assert_eq!(q.move_all_to_active_or_backoff(CLAIM_ADD, None, None), 1);
        assert_eq!(q.location(&uid("p")), Some(PodLocation::Active));
        assert_eq!(q.pending_pods().gated, 0);
        q.check_consistency().expect("consistent");
    }
}

/// Upstream's `deletePodFromSchedulingQueue`: a pending pod with a nominated node is deleted, and
/// the pods of lower or equal priority that counted it on that node are offered
/// `AssignedPodDelete`; higher-priority pods (which ignored it) are not, and a pending pod
/// without a nomination moves nobody.
#[test]
fn a_nominated_pods_deletion_is_offered_to_lower_or_equal_priority_pods() {
    let plugins = vec![fake("Fit", vec![ev(well_known::ASSIGNED_POD_DELETE)])];
    let (q, _clock) = queue(plugins);
    for (name, priority) in [("low", 5), ("equal", 10), ("high", 20)] {
        q.add(pod(name, priority));
        let qpi = pop_named(&q, name);
        assert_eq!(
            fail(&q, qpi, &["Fit"], &[]),
            Requeued::To(PodLocation::Unschedulable)
        );
    }
    let plain = pod("plain", 10);
    q.add(plain.clone());
    let _ = pop_named(&q, "plain");
    q.delete(&plain);
    assert_eq!(
        q.location(&uid("low")),
        Some(PodLocation::Unschedulable),
        "no nomination: no event"
    );

    let nominated = nominated_in_status(&pod("nominated", 10), "n1");
    q.add(nominated.clone());
    let _ = pop_named(&q, "nominated");
    assert_eq!(q.nominated_pod_deleted(&nominated), 2);
    assert_eq!(q.location(&uid("nominated")), None, "it left the queue");
    assert_eq!(q.location(&uid("low")), Some(PodLocation::Backoff));
    assert_eq!(q.location(&uid("equal")), Some(PodLocation::Backoff));
    assert_eq!(q.location(&uid("high")), Some(PodLocation::Unschedulable));
    q.check_consistency().expect("consistent");
}
