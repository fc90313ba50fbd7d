//! `NodeUnschedulable`: keeps pods off cordoned nodes (`spec.unschedulable: true`) unless they
//! tolerate the `node.kubernetes.io/unschedulable:NoSchedule` taint (upstream `nodeunschedulable`).

use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EnqueueExtensions, EventObject,
    EventResource, FilterPlugin, NodeInfo, Plugin, PodInfo, QueueingHint, QueueingHintError, Status,
};

use crate::{
    helper::{event_nodes, event_pod_objects, pod_key, tolerations},
    names::NODE_UNSCHEDULABLE,
    toleration::{NO_SCHEDULE, tolerations_tolerate},
};

/// Rejection reason for a cordoned node.
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// Rejection reason when the node object is unknown.
pub const ERR_REASON_UNKNOWN_CONDITION: &str = "node(s) had unknown conditions";
/// The taint key a pod tolerates to run on cordoned nodes.
pub const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Filters out cordoned nodes.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeUnschedulable {
    /// Honour the `Gt`/`Lt` toleration operators (alpha gate `TaintTolerationComparisonOperators`).
    pub enable_comparison_operators: bool,
}

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &str {
        NODE_UNSCHEDULABLE
    }
    unisched_framework::serves!(as_filter, as_enqueue_extensions);
}

fn unschedulable_taint() -> Taint {
    Taint {
        key: TAINT_NODE_UNSCHEDULABLE.to_string(),
        value: None,
        effect: NO_SCHEDULE.to_string(),
        time_added: None,
    }
}

fn is_cordoned(node: &Node) -> bool {
    node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
}

fn tolerates_cordon(pod: &Pod, comparison: bool) -> bool {
    tolerations_tolerate(tolerations(pod), &unschedulable_taint(), comparison)
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if node.node().is_none() {
            return Status::unresolvable(ERR_REASON_UNKNOWN_CONDITION);
        }
        if node.is_unschedulable() && !tolerates_cordon(&pod.pod, self.enable_comparison_operators) {
            return Status::unresolvable(ERR_REASON_UNSCHEDULABLE);
        }
        Status::success()
    }
}

/// Queue when a schedulable node is added or a node is uncordoned.
fn node_change(
    _pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let (old, new) = event_nodes(old, new)?;
    let now_schedulable = !is_cordoned(new);
    let became_schedulable = match old {
        None => now_schedulable,
        Some(o) => is_cordoned(o) && now_schedulable,
    };
    Ok(if became_schedulable {
        QueueingHint::Queue
    } else {
        QueueingHint::Skip
    })
}

impl EnqueueExtensions for NodeUnschedulable {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let comparison = self.enable_comparison_operators;
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD.or(ActionType::UPDATE_NODE_TAINT),
                    "NodeAdd|UpdateNodeTaint",
                ),
                node_change,
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::UnscheduledPod,
                    ActionType::UPDATE_POD_TOLERATION,
                    "UnscheduledPodUpdatePodToleration",
                ),
                // The pod itself gained a toleration: queue only when it now tolerates the cordon.
                move |pod, old, new| {
                    let (_, modified) = event_pod_objects(old, new)?;
                    Ok(match modified {
                        Some(m) if pod_key(m) == pod_key(pod) && tolerates_cordon(m, comparison) => {
                            QueueingHint::Queue
                        }
                        _ => QueueingHint::Skip,
                    })
                },
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use unisched_framework::Code;

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            pod: PodInfo,
            node: NodeInfo,
            code: Code,
        }
        let cases = [
            Case {
                name: "schedulable node",
                pod: PodBuilder::new("p").info(),
                node: NodeBuilder::new("n").info(),
                code: Code::Success,
            },
            Case {
                name: "explicitly schedulable",
                pod: PodBuilder::new("p").info(),
                node: NodeBuilder::new("n").unschedulable(false).info(),
                code: Code::Success,
            },
            Case {
                name: "cordoned",
                pod: PodBuilder::new("p").info(),
                node: NodeBuilder::new("n").unschedulable(true).info(),
                code: Code::UnschedulableAndUnresolvable,
            },
            Case {
                name: "cordoned but tolerated",
                pod: PodBuilder::new("p")
                    .toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", "NoSchedule")
                    .info(),
                node: NodeBuilder::new("n").unschedulable(true).info(),
                code: Code::Success,
            },
            Case {
                name: "toleration with the wrong effect",
                pod: PodBuilder::new("p")
                    .toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", "NoExecute")
                    .info(),
                node: NodeBuilder::new("n").unschedulable(true).info(),
                code: Code::UnschedulableAndUnresolvable,
            },
            Case {
                name: "wildcard toleration",
                pod: PodBuilder::new("p").toleration("", "Exists", "", "").info(),
                node: NodeBuilder::new("n").unschedulable(true).info(),
                code: Code::Success,
            },
            Case {
                name: "unknown node",
                pod: PodBuilder::new("p").info(),
                node: NodeInfo::placeholder("ghost"),
                code: Code::UnschedulableAndUnresolvable,
            },
        ];
        for c in cases {
            let s = NodeUnschedulable::default().filter(&CycleState::new(), &c.pod, &c.node);
            assert_eq!(s.code(), c.code, "{}", c.name);
            if c.code == Code::UnschedulableAndUnresolvable && c.node.node().is_some() {
                assert_eq!(s.message(), ERR_REASON_UNSCHEDULABLE, "{}", c.name);
            }
        }
    }

    #[test]
    fn node_hint_table() {
        struct Case {
            name: &'static str,
            old: Option<Node>,
            new: Node,
            want: QueueingHint,
        }
        let cases = [
            Case {
                name: "schedulable node added",
                old: None,
                new: NodeBuilder::new("n").build(),
                want: QueueingHint::Queue,
            },
            Case {
                name: "cordoned node added",
                old: None,
                new: NodeBuilder::new("n").unschedulable(true).build(),
                want: QueueingHint::Skip,
            },
            Case {
                name: "uncordoned",
                old: Some(NodeBuilder::new("n").unschedulable(true).build()),
                new: NodeBuilder::new("n").build(),
                want: QueueingHint::Queue,
            },
            Case {
                name: "still cordoned",
                old: Some(NodeBuilder::new("n").unschedulable(true).build()),
                new: NodeBuilder::new("n")
                    .unschedulable(true)
                    .taint("x", "", "NoSchedule")
                    .build(),
                want: QueueingHint::Skip,
            },
            Case {
                name: "was already schedulable",
                old: Some(NodeBuilder::new("n").build()),
                new: NodeBuilder::new("n").taint("x", "", "NoSchedule").build(),
                want: QueueingHint::Skip,
            },
        ];
        let pod = PodBuilder::new("p").build();
        for c in cases {
            let old = c.old.map(|n| EventObject::Node(Arc::new(n)));
            let new = EventObject::Node(Arc::new(c.new));
            assert_eq!(
                node_change(&pod, old.as_ref(), Some(&new)).unwrap(),
                c.want,
                "{}",
                c.name
            );
        }
        assert!(
            node_change(&pod, None, Some(&EventObject::Other)).is_err(),
            "wrong object type is an error"
        );
    }

    #[test]
    fn toleration_hint_table() {
        struct Case {
            name: &'static str,
            updated: Pod,
            want: QueueingHint,
        }
        let cases = [
            Case {
                name: "pod now tolerates",
                updated: PodBuilder::new("p")
                    .toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", "NoSchedule")
                    .build(),
                want: QueueingHint::Queue,
            },
            Case {
                name: "unrelated toleration",
                updated: PodBuilder::new("p")
                    .toleration("other", "Exists", "", "NoSchedule")
                    .build(),
                want: QueueingHint::Skip,
            },
            Case {
                name: "another pod",
                updated: PodBuilder::new("q")
                    .toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", "")
                    .build(),
                want: QueueingHint::Skip,
            },
        ];
        let events = NodeUnschedulable::default().events_to_register();
        let hint = events[1].hint.clone().unwrap();
        let target = PodBuilder::new("p").build();
        for c in cases {
            let old = EventObject::pod(target.clone());
            let new = EventObject::pod(c.updated);
            assert_eq!(
                hint(&target, Some(&old), Some(&new)).unwrap(),
                c.want,
                "{}",
                c.name
            );
        }
    }

    /// Upstream `TestIsSchedulableAfterNodeChange`, case by case.
    #[test]
    fn is_schedulable_after_node_change() {
        let node = |cordoned: bool, not_ready: bool| {
            let n = NodeBuilder::new("n").unschedulable(cordoned);
            let n = if not_ready {
                n.taint("node.kubernetes.io/not-ready", "", "NoExecute")
            } else {
                n
            };
            EventObject::Node(Arc::new(n.build()))
        };
        let not_a_node = || EventObject::pod(PodBuilder::new("x").build());
        // `None` as the expected hint: the hint must fail.
        let cases: Vec<(
            &str,
            Option<EventObject>,
            Option<EventObject>,
            Option<QueueingHint>,
        )> = vec![
            ("error-wrong-new-object", None, Some(not_a_node()), None),
            (
                "error-wrong-old-object",
                Some(not_a_node()),
                Some(node(true, false)),
                None,
            ),
            (
                "skip-queue-on-unschedulable-node-added",
                None,
                Some(node(true, false)),
                Some(QueueingHint::Skip),
            ),
            (
                "queue-on-schedulable-node-added",
                None,
                Some(node(false, false)),
                Some(QueueingHint::Queue),
            ),
            (
                "skip-unrelated-change-unschedulable-true",
                Some(node(true, false)),
                Some(node(true, true)),
                Some(QueueingHint::Skip),
            ),
            (
                "skip-unrelated-change-unschedulable-false",
                Some(node(false, false)),
                Some(node(false, true)),
                Some(QueueingHint::Skip),
            ),
            (
                "queue-on-unschedulable-field-change",
                Some(node(true, false)),
                Some(node(false, false)),
                Some(QueueingHint::Queue),
            ),
        ];
        let events = NodeUnschedulable::default().events_to_register();
        let hint = events[0].hint.clone().unwrap();
        let pod = PodBuilder::new("p").build();
        for (name, old, new, want) in cases {
            let got = hint(&pod, old.as_ref(), new.as_ref());
            match want {
                Some(want) => assert_eq!(got.unwrap(), want, "{name}"),
                None => assert!(got.is_err(), "{name}: want an error, got {got:?}"),
            }
        }
    }

    /// Upstream `TestIsSchedulableAfterPodTolerationChange`, case by case.
    #[test]
    fn is_schedulable_after_pod_toleration_change() {
        let target = || PodBuilder::new("uid");
        let not_a_pod = || EventObject::Node(Arc::new(NodeBuilder::new("n").build()));
        // `None` as the expected hint: the hint must fail.
        let cases: Vec<(
            &str,
            Option<EventObject>,
            Option<EventObject>,
            Option<QueueingHint>,
        )> = vec![
            ("error-wrong-new-object", None, Some(not_a_pod()), None),
            (
                "error-wrong-old-object",
                Some(not_a_pod()),
                Some(EventObject::pod(target().build())),
                None,
            ),
            (
                "queue-when-the-unsched-pod-gets-toleration",
                Some(EventObject::pod(target().build())),
                Some(EventObject::pod(
                    target()
                        .toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", "NoSchedule")
                        .build(),
                )),
                Some(QueueingHint::Queue),
            ),
            (
                "skip-when-the-unsched-pod-gets-unrelated-toleration",
                Some(EventObject::pod(target().build())),
                Some(EventObject::pod(
                    target()
                        .toleration("unrelated-key", "Exists", "", "NoSchedule")
                        .build(),
                )),
                Some(QueueingHint::Skip),
            ),
        ];
        let events = NodeUnschedulable::default().events_to_register();
        let hint = events[1].hint.clone().unwrap();
        let pod = target().build();
        for (name, old, new, want) in cases {
            let got = hint(&pod, old.as_ref(), new.as_ref());
            match want {
                Some(want) => assert_eq!(got.unwrap(), want, "{name}"),
                None => assert!(got.is_err(), "{name}: want an error, got {got:?}"),
            }
        }
    }
}
