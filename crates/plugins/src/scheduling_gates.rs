//! `SchedulingGates`: keeps pods with `spec.schedulingGates` out of the active queue until every
//! gate is removed (upstream `schedulinggates`).

use k8s_openapi::api::core::v1::Pod;
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, EnqueueExtensions, EventObject, EventResource, Plugin,
    PodInfo, PreEnqueuePlugin, QueueingHint, QueueingHintError, Status,
};

use crate::{
    helper::{event_pod_objects, pod_key},
    names::SCHEDULING_GATES,
};

/// Gates pods that carry scheduling gates.
#[derive(Clone, Copy, Debug, Default)]
pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &str {
        SCHEDULING_GATES
    }
    unisched_framework::serves!(as_pre_enqueue, as_enqueue_extensions);
}

impl PreEnqueuePlugin for SchedulingGates {
    /// `UnschedulableAndUnresolvable` with `waiting for scheduling gates: [a b]` while gates remain.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let gates = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_deref())
            .unwrap_or(&[]);
        if gates.is_empty() {
            return Status::success();
        }
        let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
        Status::unresolvable(format!("waiting for scheduling gates: [{}]", names.join(" ")))
    }

    /// Nothing: the API server already gives a gated pod its `SchedulingGated` condition.
    fn rejection_message(&self, _pod: &PodInfo, _status: &Status) -> Option<String> {
        None
    }
}

/// The pod itself lost its last gate. Upstream registers this for the target pod only; our event
/// resource is every unscheduled pod, so the hint checks it is the same pod.
fn gates_eliminated(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let (_, modified) = event_pod_objects(old, new)?;
    match modified {
        Some(m) if pod_key(m) == pod_key(pod) => Ok(QueueingHint::Queue),
        _ => Ok(QueueingHint::Skip),
    }
}

impl EnqueueExtensions for SchedulingGates {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![ClusterEventWithHint::with_hint(
            ClusterEvent::new(
                EventResource::UnscheduledPod,
                ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
                "UnscheduledPodUpdatePodSchedulingGatesEliminated",
            ),
            gates_eliminated,
        )]
    }
}

#[cfg(test)]
mod tests {
    use unisched_framework::Code;

    use super::*;
    use crate::testing::PodBuilder;

    #[test]
    fn pre_enqueue_table() {
        struct Case {
            name: &'static str,
            pod: PodInfo,
            code: Code,
            message: &'static str,
        }
        let cases = [
            Case {
                name: "no gates",
                pod: PodBuilder::new("p").info(),
                code: Code::Success,
                message: "",
            },
            Case {
                name: "one gate",
                pod: PodBuilder::new("p").scheduling_gate("example.com/a").info(),
                code: Code::UnschedulableAndUnresolvable,
                message: "waiting for scheduling gates: [example.com/a]",
            },
            Case {
                name: "two gates in order",
                pod: PodBuilder::new("p")
                    .scheduling_gate("gate1")
                    .scheduling_gate("gate2")
                    .info(),
                code: Code::UnschedulableAndUnresolvable,
                message: "waiting for scheduling gates: [gate1 gate2]",
            },
        ];
        for c in cases {
            let s = SchedulingGates.pre_enqueue(&c.pod);
            assert_eq!(s.code(), c.code, "{}", c.name);
            assert_eq!(s.message(), c.message, "{}", c.name);
            // The API server's `SchedulingGated` condition says it already: nothing to report.
            assert_eq!(SchedulingGates.rejection_message(&c.pod, &s), None, "{}", c.name);
        }
    }

    #[test]
    fn hint_table() {
        struct Case {
            name: &'static str,
            updated: Pod,
            want: QueueingHint,
        }
        let target = PodBuilder::new("p").build();
        let cases = [
            Case {
                name: "the pod itself",
                updated: PodBuilder::new("p").build(),
                want: QueueingHint::Queue,
            },
            Case {
                name: "another pod",
                updated: PodBuilder::new("q").build(),
                want: QueueingHint::Skip,
            },
        ];
        let events = SchedulingGates.events_to_register();
        assert_eq!(events.len(), 1);
        let hint = events[0].hint.clone().unwrap();
        for c in cases {
            let old = EventObject::pod(c.updated.clone());
            let new = EventObject::pod(c.updated);
            assert_eq!(
                hint(&target, Some(&old), Some(&new)).unwrap(),
                c.want,
                "{}",
                c.name
            );
        }
    }
}
