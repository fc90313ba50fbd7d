//! Ordering, backoff, flushes, counters and construction.

use std::{sync::Arc, time::Duration};

use unisched_framework::{ActionType, ClusterEvent, EventResource, well_known};

use super::fakes::*;
use crate::{
    PodLocation, QueueConfig, QueueError, Requeued, SchedulingQueue, backoff_duration, testing::FakeClock,
};

const MS: Duration = Duration::from_millis(1);

#[test]
fn active_order_is_priority_then_timestamp_then_fifo() {
    let (q, clock) = queue(vec![]);
    q.add(pod("low", 0));
    clock.advance(SEC);
    q.add(pod("high", 10));
    q.add(pod("mid-a", 5));
    q.add(pod("mid-b", 5));
    q.add(pod("mid-c", 5));
    clock.advance(SEC);
    q.add(pod("low-later", 0));
    let order: Vec<String> = std::iter::from_fn(|| q.try_pop())
        .map(|p| p.pod_info.name.clone())
        .collect();
    assert_eq!(order, ["high", "mid-a", "mid-b", "mid-c", "low", "low-later"]);
    assert_eq!(q.scheduling_cycle(), 6);
    assert!(q.try_pop().is_none());
}

#[test]
fn backoff_duration_table() {
    let (i, m) = (SEC, 10 * SEC);
    let cases = [
        (0, Duration::ZERO),
        (1, SEC),
        (2, 2 * SEC),
        (3, 4 * SEC),
        (4, 8 * SEC),
        (5, 10 * SEC),
        (6, 10 * SEC),
        (64, 10 * SEC),
        (u32::MAX, 10 * SEC),
    ];
    for (count, want) in cases {
        assert_eq!(backoff_duration(i, m, count), want, "count {count}");
    }
    assert_eq!(
        backoff_duration(i, Duration::ZERO, 3),
        Duration::ZERO,
        "max 0 disables backoff"
    );
    assert_eq!(
        backoff_duration(20 * SEC, 10 * SEC, 1),
        10 * SEC,
        "initial above max is capped"
    );
    assert_eq!(
        backoff_duration(Duration::from_millis(300), SEC, 3),
        Duration::from_millis(1000)
    );
}

/// Consecutive errors back off 1 s, 2 s, 4 s, 8 s, 10 s, 10 s (exact expiry, no windows).
#[test]
fn error_backoff_durations_exact() {
    let (q, clock) = queue_with(vec![], |b| b.pop_from_backoff(false));
    q.add(pod("p", 0));
    for (attempt, want) in [1u64, 2, 4, 8, 10, 10].into_iter().enumerate() {
        let qpi = pop_named(&q, "p");
        assert_eq!(
            fail(&q, qpi, &[], &[]),
            Requeued::To(PodLocation::Backoff),
            "attempt {attempt}"
        );
        let entry = q.get(&uid("p")).expect("queued");
        assert_eq!(entry.consecutive_errors_count as usize, attempt + 1);
        assert_eq!(entry.unschedulable_count, 0);
        clock.advance(Duration::from_secs(want) - MS);
        assert_eq!(
            q.flush_backoff_completed(),
            0,
            "attempt {attempt}: still backing off"
        );
        assert!(q.try_pop().is_none(), "error backoff is never popped early");
        clock.advance(MS);
        assert_eq!(
            q.flush_backoff_completed(),
            1,
            "attempt {attempt}: backoff of {want}s over"
        );
        assert_eq!(q.location(&uid("p")), Some(PodLocation::Active));
    }
}

/// A pod counts among the repeated errors from its third consecutive error on, and no longer once
/// an attempt ends in a rejection; a pod backing off after a rejection never counts.
#[test]
fn repeated_errors_count_from_the_third_consecutive_error() {
    let (q, _clock) = queue(vec![fake("A", vec![node_hint(well_known::NODE_ADD)])]);
    q.add(pod("r", 0));
    fail(&q, pop_named(&q, "r"), &["A"], &[]);
    q.add(pod("p", 0));
    q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, node("n", true));
    assert_eq!(q.location(&uid("r")), Some(PodLocation::Backoff));
    for (errors, want) in [(1, 0), (2, 0), (3, 1), (4, 1)] {
        fail(&q, pop_named(&q, "p"), &[], &[]);
        let pending = q.pending_pods();
        assert_eq!(
            (pending.backoff, pending.repeated_errors),
            (2, want),
            "{errors} errors"
        );
        q.activate(["default/p"]);
    }
    fail(&q, pop_named(&q, "p"), &["A"], &[]);
    assert_eq!(
        q.pending_pods().repeated_errors,
        0,
        "a rejection ends the run of errors"
    );
}

/// A rejection resets the error count; the unschedulable count drives the backoff.
#[test]
fn rejection_resets_errors() {
    let (q, _clock) = queue(vec![fake("A", vec![])]);
    q.add(pod("p", 0));
    fail(&q, pop_named(&q, "p"), &[], &[]);
    q.activate(["default/p"]);
    fail(&q, pop_named(&q, "p"), &[], &[]);
    assert_eq!(q.get(&uid("p")).map(|e| e.consecutive_errors_count), Some(2));
    q.activate(["default/p"]);
    assert_eq!(
        fail(&q, pop_named(&q, "p"), &["A"], &[]),
        Requeued::To(PodLocation::Unschedulable)
    );
    let e = q.get(&uid("p")).expect("queued");
    assert_eq!(
        (e.unschedulable_count, e.consecutive_errors_count, e.attempts),
        (1, 0, 3)
    );
    assert!(e.unschedulable_plugins.contains("A"));
}

/// With PopFromBackoffQ, expiry is truncated to the 1 s window and a window is released only when
/// it has fully passed.
#[test]
fn backoff_windows() {
    let (q, clock) = queue(vec![]);
    let start = crate::Clock::now(&*clock); // the queue's epoch: windows start here
    q.add(pod("p", 0));
    let qpi = pop_named(&q, "p");
    clock.advance(300 * MS);
    fail(&q, qpi, &[], &[]);
    // timestamp 0.3 s + 1 s = 1.3 s, aligned to the [1 s, 2 s) window.
    for (at_ms, moved) in [(1000, 0), (1999, 0), (2000, 1)] {
        clock.set(start + Duration::from_millis(at_ms));
        assert_eq!(q.flush_backoff_completed(), moved, "at {at_ms} ms");
    }
    assert_eq!(q.until_next_backoff_window(), SEC);
    clock.advance(250 * MS);
    assert_eq!(q.until_next_backoff_window(), 750 * MS);
}

/// Rejected pods wake after an event, into backoffQ while backing off, and are popped from there
/// when activeQ is empty; error pods are not.
#[test]
fn pop_from_backoff_when_active_is_empty() {
    let node_fit = fake("NodeFit", vec![ev(well_known::NODE_ADD)]);
    let (q, _clock) = queue(vec![node_fit]);
    q.add(pod("rejected", 0));
    q.add(pod("errored", 0));
    let r = pop_named(&q, "rejected");
    let e = pop_named(&q, "errored");
    assert_eq!(
        fail(&q, r, &["NodeFit"], &[]),
        Requeued::To(PodLocation::Unschedulable)
    );
    assert_eq!(fail(&q, e, &[], &[]), Requeued::To(PodLocation::Backoff));
    assert_eq!(
        q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, node("n", true)),
        1
    );
    assert_eq!(q.location(&uid("rejected")), Some(PodLocation::Backoff));
    assert_eq!(
        q.try_pop().map(|p| p.pod_info.name.clone()).as_deref(),
        Some("rejected")
    );
    assert!(
        q.try_pop().is_none(),
        "the error backoff queue is not popped early"
    );

    let (q, _clock) = queue_with(vec![fake("NodeFit", vec![ev(well_known::NODE_ADD)])], |b| {
        b.pop_from_backoff(false)
    });
    q.add(pod("rejected", 0));
    fail(&q, pop_named(&q, "rejected"), &["NodeFit"], &[]);
    q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, None);
    assert!(
        q.try_pop().is_none(),
        "without PopFromBackoffQ backoffQ waits for its flush"
    );
}

#[test]
fn unschedulable_timeout_flush() {
    let (q, clock) = queue(vec![fake("A", vec![])]);
    q.add(pod("p", 0));
    assert_eq!(
        fail(&q, pop_named(&q, "p"), &["A"], &[]),
        Requeued::To(PodLocation::Unschedulable)
    );
    clock.advance(5 * 60 * SEC);
    assert_eq!(
        q.flush_unschedulable_leftover(),
        0,
        "exactly 5 minutes is not more than 5 minutes"
    );
    clock.advance(MS);
    assert_eq!(q.flush_unschedulable_leftover(), 1);
    assert_eq!(
        q.location(&uid("p")),
        Some(PodLocation::Active),
        "backoff long over: straight to activeQ"
    );

    // A shorter setting, with the backoff still running: the pod goes to backoffQ.
    let (q, clock) = queue_with(vec![fake("A", vec![])], |b| {
        b.max_in_unschedulable(SEC)
            .pod_initial_backoff(10 * SEC)
            .pod_max_backoff(60 * SEC)
    });
    q.add(pod("p", 0));
    fail(&q, pop_named(&q, "p"), &["A"], &[]);
    clock.advance(2 * SEC);
    assert_eq!(q.flush_unschedulable_leftover(), 1);
    assert_eq!(q.location(&uid("p")), Some(PodLocation::Backoff));
}

#[test]
fn rejected_backoff_grows_with_unschedulable_count() {
    let (q, clock) = queue_with(vec![fake("A", vec![ev(well_known::NODE_ADD)])], |b| {
        b.pop_from_backoff(false)
    });
    q.add(pod("p", 0));
    for (n, secs) in [(1u32, 1u64), (2, 2), (3, 4), (4, 8), (5, 10), (6, 10)] {
        let qpi = pop_named(&q, "p");
        assert_eq!(
            fail(&q, qpi, &["A"], &[]),
            Requeued::To(PodLocation::Unschedulable)
        );
        q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, None);
        assert_eq!(q.location(&uid("p")), Some(PodLocation::Backoff), "count {n}");
        clock.advance(Duration::from_secs(secs) - MS);
        assert_eq!(q.flush_backoff_completed(), 0, "count {n}");
        clock.advance(MS);
        assert_eq!(q.flush_backoff_completed(), 1, "count {n}");
    }
}

#[test]
fn max_backoff_zero_disables_backoff() {
    let (q, _clock) = queue_with(vec![], |b| b.pod_max_backoff(Duration::ZERO));
    q.add(pod("p", 0));
    assert_eq!(
        fail(&q, pop_named(&q, "p"), &[], &[]),
        Requeued::To(PodLocation::Active)
    );
}

#[test]
fn construction_errors() {
    let clock: Arc<FakeClock> = Arc::new(FakeClock::new());
    let cfg = || QueueConfig::builder().clock(clock.clone()).build();
    assert_eq!(
        SchedulingQueue::new(vec![], cfg()).err(),
        Some(QueueError::NoProfiles)
    );
    let a = framework_named("a", vec![]);
    let a2 = framework_named("a", vec![]);
    assert_eq!(
        SchedulingQueue::new(vec![a.clone(), a2], cfg()).err(),
        Some(QueueError::DuplicateProfile("a".into()))
    );
    let other = framework_exact("b", vec![Arc::new(OtherSort), Arc::new(Bind)]);
    assert!(matches!(
        SchedulingQueue::new(vec![a.clone(), other], cfg()),
        Err(QueueError::QueueSortMismatch { .. })
    ));
    let b = framework_named("b", vec![]);
    let q = SchedulingQueue::new(vec![a, b], cfg()).expect("two profiles");
    let mut p = raw_pod("x", 0);
    if let Some(s) = p.spec.as_mut() {
        s.scheduler_name = Some("b".into());
    }
    assert!(q.add(Arc::new(unisched_framework::PodInfo::new(p))));
    assert!(
        !q.add(pod("unknown-profile", 0)),
        "schedulerName unisched has no profile here"
    );
    assert_eq!(q.pending_pods().active, 1);
}

#[test]
fn unknown_update_adds_and_unregistered_event_is_dropped() {
    let (q, _clock) = queue(vec![fake("A", vec![ev(well_known::NODE_ADD)])]);
    q.update(None, pod("p", 0));
    assert_eq!(q.location(&uid("p")), Some(PodLocation::Active));
    let qpi = pop_named(&q, "p");
    let pv = ClusterEvent::new(
        EventResource::PersistentVolume,
        ActionType::ADD,
        "PersistentVolumeAdd",
    );
    assert_eq!(q.move_all_to_active_or_backoff(pv, None, None), 0);
    assert_eq!(
        q.in_flight_events(),
        0,
        "events nobody registered are not even recorded"
    );
    q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, None);
    assert_eq!(q.in_flight_events(), 1);
    fail(&q, qpi, &["A"], &[]);
    assert_eq!(q.in_flight_events(), 0);
}

/// Each pod's hints come from its own profile.
#[test]
fn hints_are_per_profile() {
    let clock = Arc::new(FakeClock::new());
    let a = framework_named("a", vec![fake("NodeFit", vec![node_hint(well_known::NODE_ADD)])]);
    let b = framework_named("b", vec![fake("NodeFit", vec![ev(well_known::NODE_ADD)])]);
    let q = SchedulingQueue::new(vec![a, b], QueueConfig::builder().clock(clock).build()).expect("queue");
    for (name, profile) in [("pa", "a"), ("pb", "b")] {
        let mut p = raw_pod(name, 0);
        if let Some(s) = p.spec.as_mut() {
            s.scheduler_name = Some(profile.into());
        }
        q.add(Arc::new(unisched_framework::PodInfo::new(p)));
        let qpi = pop_named(&q, name);
        assert_eq!(
            fail(&q, qpi, &["NodeFit"], &[]),
            Requeued::To(PodLocation::Unschedulable)
        );
    }
    assert_eq!(
        q.move_all_to_active_or_backoff(well_known::NODE_ADD, None, node("n", false)),
        1
    );
    assert_eq!(
        q.location(&uid("pa")),
        Some(PodLocation::Unschedulable),
        "profile a's hint skips"
    );
    assert_eq!(
        q.location(&uid("pb")),
        Some(PodLocation::Backoff),
        "profile b has no hint: Queue"
    );
}
