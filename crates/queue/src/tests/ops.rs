//! activate, nominator, delete, update in place, done, failures, pending counts, blocking pop.

use std::{sync::Arc, time::Duration};

use unisched_framework::{PodInfo, PodNominator, Status, well_known};

use super::fakes::*;
use crate::{DropReason, PendingPods, PodLocation, QueueError, Requeued, SchedulingQueue};

fn node_fit() -> Arc<dyn unisched_framework::Plugin> {
    fake("NodeFit", vec![node_hint(well_known::NODE_ADD)])
}

#[test]
fn activate_moves_pool_and_backoff_and_marks_in_flight() {
    let (q, _clock) = queue(vec![node_fit()]);
    q.add(pod("pool", 0));
    q.add(pod("backoff", 0));
    q.add(pod("flight", 0));
    q.add(pod("other", 0));
    fail(&q, pop_named(&q, "pool"), &["NodeFit"], &[]);
    fail(&q, pop_named(&q, "backoff"), &[], &[]);
    let flight = pop_named(&q, "flight");
    let other = pop_named(&q, "other");
    assert_eq!(q.location(&uid("backoff")), Some(PodLocation::Backoff));

    q.activate([
        "default/pool",
        "default/backoff",
        "default/flight",
        "default/nope",
    ]);
    assert_eq!(q.location(&uid("pool")), Some(PodLocation::Active));
    assert_eq!(q.location(&uid("backoff")), Some(PodLocation::Active));
    assert_eq!(
        fail(&q, flight, &["NodeFit"], &[]),
        Requeued::To(PodLocation::Backoff),
        "ForceActivate targets it"
    );
    assert_eq!(
        fail(&q, other, &["NodeFit"], &[]),
        Requeued::To(PodLocation::Unschedulable),
        "but not others"
    );
    q.check_consistency().expect("consistent");
}

#[test]
fn activate_keeps_gated_pods_gated() {
    let gate = Arc::new(Gate {
        name: "G",
        by_gates: true,
        events: vec![],
    });
    let (q, _clock) = queue(vec![gate]);
    q.add(gated_pod("g"));
    q.activate(["default/g"]);
    assert_eq!(q.location(&uid("g")), Some(PodLocation::Gated));
}

#[test]
fn nominator() {
    let (q, _clock) = queue(vec![node_fit()]);
    let a = nominated_in_status(&pod("a", 5), "n1");
    q.add(a.clone());
    assert_eq!(names(q.nominated_pods_for_node("n1")), ["a"]);

    let b = pod("b", 0);
    q.add(b.clone());
    q.add_nominated_pod(b.clone(), Some("n2"));
    assert_eq!(q.nominated_node(&uid("b")).as_deref(), Some("n2"));
    let b2 = labeled(&b, "x", "1");
    q.update(Some(&b), b2.clone());
    assert_eq!(
        q.nominated_node(&uid("b")).as_deref(),
        Some("n2"),
        "kept across an update without a nomination"
    );
    assert_eq!(
        q.nominated_pods_for_node("n2")[0]
            .pod
            .metadata
            .labels
            .as_ref()
            .map(|l| l.len()),
        Some(1),
        "fresh object"
    );
    let b3 = nominated_in_status(&b2, "n3");
    q.update(Some(&b2), b3);
    assert_eq!(
        q.nominated_node(&uid("b")).as_deref(),
        Some("n3"),
        "the status wins when it changes"
    );

    // A failure applies PostFilter's nomination; "" clears it.
    let qpi = pop_named(&q, "a");
    let f = failure(qpi.pod_info.clone(), &["NodeFit"], Some("n9"));
    assert_eq!(
        q.handle_failure(qpi, &f),
        Ok(Requeued::To(PodLocation::Unschedulable))
    );
    assert_eq!(q.nominated_node(&uid("a")).as_deref(), Some("n9"));
    q.activate(["default/a"]);
    let qpi = pop_named(&q, "a");
    let f = failure(qpi.pod_info.clone(), &["NodeFit"], Some(""));
    q.handle_failure(qpi, &f).expect("requeued");
    assert_eq!(q.nominated_node(&uid("a")), None);

    // Cleared on delete and on bind; ignored for unknown or bound pods.
    q.delete(&b);
    assert_eq!(q.nominated_node(&uid("b")), None);
    q.add_nominated_pod(pod("stranger", 0), Some("n1"));
    assert_eq!(q.nominated_node(&uid("stranger")), None);
    let c = pod("c", 0);
    q.add(c.clone());
    q.add_nominated_pod(c.clone(), Some("n1"));
    assert_eq!(q.nominated_count(), 1);
    q.assigned_pod_added(&with(&c, |p| {
        if let Some(s) = p.spec.as_mut() {
            s.node_name = Some("n1".into());
        }
    }));
    assert_eq!(q.nominated_node(&uid("c")), None);
    q.delete_nominated_pod_if_exists(&uid("a"));
    assert_eq!(q.nominated_count(), 0);
}

fn names(pods: Vec<Arc<PodInfo>>) -> Vec<String> {
    pods.iter().map(|p| p.name.clone()).collect()
}

/// Builds a queue holding pod `p` in `place`; returns the popped entry when it is in flight.
fn place(q: &SchedulingQueue, place: PodLocation) -> Option<unisched_framework::QueuedPodInfo> {
    match place {
        PodLocation::Gated => {
            q.add(gated_pod("p"));
        }
        _ => {
            q.add(pod("p", 0));
        }
    }
    match place {
        PodLocation::Active | PodLocation::Gated => None,
        PodLocation::Backoff => {
            fail(q, pop_named(q, "p"), &[], &[]);
            None
        }
        PodLocation::Unschedulable => {
            fail(q, pop_named(q, "p"), &["NodeFit"], &[]);
            None
        }
        PodLocation::InFlight => Some(pop_named(q, "p")),
        PodLocation::Done => {
            let qpi = pop_named(q, "p");
            q.done(&qpi.pod_info.uid);
            None
        }
    }
}

#[test]
fn delete_from_every_place() {
    let all = [
        PodLocation::Active,
        PodLocation::Backoff,
        PodLocation::Unschedulable,
        PodLocation::Gated,
        PodLocation::InFlight,
        PodLocation::Done,
    ];
    for where_ in all {
        let (q, _clock) = queue(vec![
            node_fit(),
            Arc::new(Gate {
                name: "G",
                by_gates: true,
                events: vec![],
            }),
        ]);
        let popped = place(&q, where_);
        assert_eq!(q.location(&uid("p")), Some(where_), "setup {where_}");
        q.add_nominated_pod(pod("p", 0), Some("n"));
        q.delete(&pod("p", 0));
        assert_eq!(q.location(&uid("p")), None, "{where_}");
        assert_eq!(q.pending_pods(), PendingPods::default(), "{where_}");
        assert_eq!(q.nominated_node(&uid("p")), None, "{where_}");
        q.check_consistency().expect("consistent");
        if let Some(qpi) = popped {
            assert_eq!(
                fail(&q, qpi, &["NodeFit"], &[]),
                Requeued::Dropped(DropReason::Deleted)
            );
            assert_eq!(q.location(&uid("p")), None);
            q.check_consistency().expect("consistent");
        }
        assert!(q.try_pop().is_none(), "{where_}");
    }
}

#[test]
fn failure_after_done_requeues_but_deleted_or_bound_pods_are_dropped() {
    let (q, _clock) = queue(vec![node_fit()]);
    q.add(pod("p", 0));
    let qpi = pop_named(&q, "p");
    q.done(&qpi.pod_info.uid);
    assert_eq!(q.location(&uid("p")), Some(PodLocation::Done));
    assert_eq!(q.pending_pods(), PendingPods::default());
    // Binding failed: the pod comes back even though done() was called.
    assert_eq!(fail(&q, qpi, &[], &[]), Requeued::To(PodLocation::Backoff));

    // Deleted after done.
    q.activate(["default/p"]);
    let qpi = pop_named(&q, "p");
    q.done(&qpi.pod_info.uid);
    q.delete(&qpi.pod_info.clone());
    assert_eq!(fail(&q, qpi, &[], &[]), Requeued::Dropped(DropReason::NotTracked));

    // Bound by someone else while in flight (seen as an update with a node: a delete).
    let p = pod("b", 0);
    q.add(p.clone());
    let qpi = pop_named(&q, "b");
    q.update(
        Some(&p),
        with(&p, |x| {
            if let Some(s) = x.spec.as_mut() {
                s.node_name = Some("n".into());
            }
        }),
    );
    assert_eq!(fail(&q, qpi, &[], &[]), Requeued::Dropped(DropReason::Deleted));

    // Bound: a Done pod is forgotten when the watch shows it assigned.
    q.add(pod("s", 0));
    let qpi = pop_named(&q, "s");
    q.done(&qpi.pod_info.uid);
    q.assigned_pod_added(&with(&qpi.pod_info, |x| {
        if let Some(s) = x.spec.as_mut() {
            s.node_name = Some("n".into());
        }
    }));
    assert_eq!(q.location(&uid("s")), None);
    q.check_consistency().expect("consistent");
}

#[test]
fn requeue_twice_is_an_error() {
    let (q, _clock) = queue(vec![node_fit()]);
    q.add(pod("p", 0));
    let qpi = pop_named(&q, "p");
    let copy = qpi.clone();
    fail(&q, qpi, &["NodeFit"], &[]);
    assert!(matches!(
        q.add_unschedulable_if_not_present(copy, 1),
        Err(QueueError::AlreadyPresent {
            queue: PodLocation::Unschedulable,
            ..
        })
    ));
}

#[test]
fn handle_failure_with_error_status() {
    let (q, _clock) = queue(vec![node_fit()]);
    q.add(pod("p", 0));
    let qpi = pop_named(&q, "p");
    let mut f = failure(qpi.pod_info.clone(), &[], None);
    f.status = Status::error("api down");
    assert_eq!(q.handle_failure(qpi, &f), Ok(Requeued::To(PodLocation::Backoff)));
    assert_eq!(q.get(&uid("p")).map(|e| e.consecutive_errors_count), Some(1));
}

#[test]
fn update_in_place_reorders() {
    let (q, _clock) = queue(vec![]);
    let a = pod("a", 5);
    let b = pod("b", 1);
    q.add(a);
    q.add(b.clone());
    q.update(Some(&b), pod("b", 10));
    assert_eq!(pop_named(&q, "b").pod_info.priority, 10);
    assert_eq!(pop_named(&q, "a").pod_info.priority, 5);

    // Re-adding a tracked pod is an update, never a duplicate.
    q.add(pod("c", 0));
    q.add(pod("c", 3));
    assert_eq!(q.pending_pods().active, 1);
    assert_eq!(pop_named(&q, "c").pod_info.priority, 3);
}

#[test]
fn pending_pods_counts() {
    let (q, _clock) = queue(vec![
        node_fit(),
        Arc::new(Gate {
            name: "G",
            by_gates: true,
            events: vec![],
        }),
    ]);
    for n in ["u", "b", "f", "a"] {
        q.add(pod(n, 0));
    }
    fail(&q, pop_named(&q, "u"), &["NodeFit"], &[]);
    fail(&q, pop_named(&q, "b"), &[], &[]);
    let _f = pop_named(&q, "f");
    q.add(gated_pod("g"));
    let want = PendingPods {
        active: 1,
        backoff: 1,
        unschedulable: 1,
        gated: 1,
        in_flight: 1,
        repeated_errors: 0,
    };
    assert_eq!(q.pending_pods(), want);
    assert_eq!(
        want.by_label(),
        [("active", 1), ("backoff", 1), ("unschedulable", 1), ("gated", 1)]
    );
    for (loc, n) in [
        (PodLocation::Active, "a"),
        (PodLocation::Backoff, "b"),
        (PodLocation::Unschedulable, "u"),
        (PodLocation::Gated, "g"),
        (PodLocation::InFlight, "f"),
    ] {
        assert_eq!(q.pods_in(loc), vec![uid(n)], "{loc}");
    }
}

#[test]
fn blocking_pop_and_close() {
    let (q, _clock) = queue(vec![]);
    let q = Arc::new(q);
    assert!(q.pop(Duration::from_millis(5)).is_none(), "times out when empty");
    let popper = {
        let q = q.clone();
        std::thread::spawn(move || q.pop(Duration::from_secs(30)).map(|p| p.pod_info.name.clone()))
    };
    q.add(pod("p", 0));
    assert_eq!(popper.join().ok().flatten().as_deref(), Some("p"));

    let waiter = {
        let q = q.clone();
        std::thread::spawn(move || q.pop(Duration::from_secs(30)).is_none())
    };
    q.close();
    assert!(waiter.join().unwrap_or(false), "close wakes and ends pop");
}

/// Records what the queue reports for `scheduler_queue_incoming_pods_total` and
/// `scheduler_unschedulable_pods`, and the PreEnqueue refusals passed on to be reported.
#[derive(Debug, Default)]
struct Recorder {
    incoming: parking_lot::Mutex<Vec<(String, String)>>,
    unschedulable: parking_lot::Mutex<std::collections::BTreeMap<(String, String), i64>>,
    gated: parking_lot::Mutex<Vec<(String, String, String)>>,
}

impl crate::QueueObserver for Recorder {
    fn incoming(&self, queue: &'static str, event: &str) {
        self.incoming.lock().push((queue.to_string(), event.to_string()));
    }
    fn unschedulable(&self, plugin: &str, profile: &str, delta: i64) {
        *self
            .unschedulable
            .lock()
            .entry((plugin.to_string(), profile.to_string()))
            .or_default() += delta;
    }
    fn gated(&self, pod: &PodInfo, _profile: &str, plugin: &str, message: &str) {
        self.gated
            .lock()
            .push((pod.name.clone(), plugin.to_string(), message.to_string()));
    }
}

/// A refusal whose plugin opts out of telling the user (KEP-5501) gates the pod just the same,
/// but is not passed on to the observer that reports refusals; every other refusal is, with the
/// plugin's message.
#[test]
fn observer_gets_the_refusals_the_plugin_wants_reported() {
    let rec = Arc::new(Recorder::default());
    let obs: Arc<dyn crate::QueueObserver> = rec.clone();
    let gate = Arc::new(Gate {
        name: "G",
        by_gates: false,
        events: vec![],
    });
    let (q, _clock) = queue_with(vec![gate], |b| b.observer(obs));
    q.add(labeled(&pod("loud", 0), "needs", "G"));
    q.add(labeled(&labeled(&pod("quiet", 0), "needs", "G"), "quiet", "yes"));
    for name in ["loud", "quiet"] {
        assert_eq!(q.location(&uid(name)), Some(PodLocation::Gated), "{name}");
    }
    let gated = |name: &str| (name.to_string(), "G".to_string(), "gated by G".to_string());
    assert_eq!(*rec.gated.lock(), vec![gated("loud")]);
}

/// A PreEnqueue plugin that refuses every pod with whatever `reason` says now, and is asked again
/// on NodeAdd.
struct ShiftingGate {
    reason: parking_lot::Mutex<String>,
}

impl unisched_framework::Plugin for ShiftingGate {
    fn name(&self) -> &str {
        "Shifting"
    }
    unisched_framework::serves!(as_pre_enqueue, as_enqueue_extensions);
}

impl unisched_framework::PreEnqueuePlugin for ShiftingGate {
    fn pre_enqueue(&self, _pod: &PodInfo) -> Status {
        Status::unresolvable(self.reason.lock().clone())
    }
}

impl unisched_framework::EnqueueExtensions for ShiftingGate {
    fn events_to_register(&self) -> Vec<unisched_framework::ClusterEventWithHint> {
        vec![ev(well_known::NODE_ADD)]
    }
}

/// A gated pod checked again by the plugin that gates it is reported again, so a new reason
/// reaches the user (a gang member whose PodGroup was deleted used to keep saying it waited for
/// its quorum).
#[test]
fn observer_gets_the_new_reason_of_a_pod_still_gated_by_the_same_plugin() {
    let rec = Arc::new(Recorder::default());
    let obs: Arc<dyn crate::QueueObserver> = rec.clone();
    let gate = Arc::new(ShiftingGate {
        reason: parking_lot::Mutex::new("waiting for the quorum".into()),
    });
    let (q, _clock) = queue_with(vec![gate.clone()], |b| b.observer(obs));
    q.add(pod("p", 0));
    assert_eq!(q.location(&uid("p")), Some(PodLocation::Gated));
    *gate.reason.lock() = "waiting for the group".into();
    q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, node("n1", true));
    assert_eq!(q.location(&uid("p")), Some(PodLocation::Gated));
    let reasons: Vec<String> = rec.gated.lock().iter().map(|(_, _, m)| m.clone()).collect();
    assert_eq!(
        reasons.last().map(String::as_str),
        Some("waiting for the group"),
        "{reasons:?}"
    );
}

#[test]
fn observer_sees_incoming_pods_and_rejector_counts() {
    let rec = Arc::new(Recorder::default());
    let obs: Arc<dyn crate::QueueObserver> = rec.clone();
    let (q, _clock) = queue_with(vec![node_fit()], |b| b.observer(obs));
    q.add(pod("a", 0));
    q.add(pod("b", 0));
    let a = pop_named(&q, "a");
    assert_eq!(
        fail(&q, a, &["NodeFit"], &[]),
        Requeued::To(PodLocation::Unschedulable)
    );
    let b = pop_named(&q, "b");
    assert_eq!(fail(&q, b, &[], &[]), Requeued::To(PodLocation::Backoff));
    let profile = pod("a", 0).scheduler_name().to_string();
    let key = ("NodeFit".to_string(), profile.clone());
    assert_eq!(
        rec.unschedulable.lock().get(&key),
        Some(&1),
        "one pod rejected by NodeFit"
    );
    let pair = |q: &str, e: &str| (q.to_string(), e.to_string());
    assert_eq!(
        *rec.incoming.lock(),
        vec![
            pair("active", crate::UNSCHEDULED_POD_ADD),
            pair("active", crate::UNSCHEDULED_POD_ADD),
            pair("unschedulable", crate::SCHEDULE_ATTEMPT_FAILURE),
            pair("backoff", crate::SCHEDULE_ATTEMPT_FAILURE),
        ]
    );
    // A node event wakes the rejected pod; popping it ends its count.
    q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, node("n1", true));
    let seen = rec.incoming.lock().clone();
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert_eq!(
        seen[4].1,
        well_known::NODE_ADD.label,
        "woken by NodeAdd: {seen:?}"
    );
    assert!(q.location(&uid("a")).is_some());
    let _ = q.try_pop();
    let _ = q.try_pop();
    assert_eq!(
        rec.unschedulable.lock().get(&key),
        Some(&0),
        "popped: no longer counted"
    );
    // Deleting a rejected pod that waits in the pool also ends its count.
    q.add(pod("c", 0));
    let c = pop_named(&q, "c");
    fail(&q, c, &["NodeFit"], &[]);
    assert_eq!(rec.unschedulable.lock().get(&key), Some(&1));
    q.delete(&pod("c", 0));
    assert_eq!(rec.unschedulable.lock().get(&key), Some(&0));
}

/// A PreEnqueue plugin whose verdict the test switches, as a gang's quorum switches when its
/// last member is seen before the event that releases the others is handled.
struct Quorum(Arc<std::sync::atomic::AtomicBool>);
impl unisched_framework::Plugin for Quorum {
    fn name(&self) -> &str {
        "Quorum"
    }
    unisched_framework::serves!(as_pre_enqueue);
}
impl unisched_framework::PreEnqueuePlugin for Quorum {
    fn pre_enqueue(&self, _pod: &PodInfo) -> Status {
        if self.0.load(std::sync::atomic::Ordering::Relaxed) {
            Status::success()
        } else {
            Status::unresolvable("waiting for the quorum")
        }
    }
}

#[test]
fn group_members_come_along_once_pre_enqueue_lets_them_through() {
    let met = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let gate = Arc::new(Gate {
        name: "G",
        by_gates: true,
        events: vec![],
    });
    let (q, _clock) = queue(vec![Arc::new(Quorum(met.clone())), gate]);
    q.add(pod("waiting", 0));
    q.add(gated_pod("gated"));
    assert_eq!(q.location(&uid("waiting")), Some(PodLocation::Gated));
    assert_eq!(q.location(&uid("gated")), Some(PodLocation::Gated));
    assert!(
        q.take_group_members([uid("waiting").as_str()]).is_empty(),
        "still refused: stays gated"
    );
    assert_eq!(q.location(&uid("waiting")), Some(PodLocation::Gated));

    met.store(true, std::sync::atomic::Ordering::Relaxed);
    let taken = q.take_group_members([uid("waiting").as_str(), uid("gated").as_str()]);
    assert_eq!(
        taken.iter().map(|m| m.pod_info.name.as_str()).collect::<Vec<_>>(),
        ["waiting"],
        "the member PreEnqueue now passes comes along; a pod another gate holds does not"
    );
    assert!(taken[0].gating_plugin.is_none());
    assert_eq!(q.location(&uid("waiting")), Some(PodLocation::InFlight));
    assert_eq!(q.location(&uid("gated")), Some(PodLocation::Gated));
    q.check_consistency().expect("consistent");
}
