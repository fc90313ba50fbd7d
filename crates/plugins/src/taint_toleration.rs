//! `TaintToleration`: pods stay off nodes whose `NoSchedule`/`NoExecute` taints they do not
//! tolerate, and prefer nodes with fewer untolerated `PreferNoSchedule` taints (upstream
//! `tainttoleration`).
//!
//! The rejection reason is the generic `node(s) had untolerated taint(s)`: since Kubernetes 1.35
//! (back-ported to 1.34) upstream no longer puts taint keys and values in pod statuses and events,
//! because they may be sensitive; the offending taint is logged instead (here at debug level).
//! Releases up to 1.33 printed `node(s) had untolerated taint {key: value}`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Toleration};
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EnqueueExtensions, EventObject,
    EventResource, FilterPlugin, MAX_NODE_SCORE, NodeInfo, NodeScore, Plugin, PodInfo, PreScorePlugin,
    QueueingHint, QueueingHintError, ScorePlugin, Status,
};

use crate::{
    helper::{default_normalize_score, event_nodes, event_pod_objects, pod_key, taints, tolerations},
    names::TAINT_TOLERATION,
    toleration::{PREFER_NO_SCHEDULE, do_not_schedule, find_untolerated_taint, tolerations_tolerate},
};

/// Rejection reason for a node with an untolerated `NoSchedule`/`NoExecute` taint.
pub const ERR_REASON_NOT_MATCH: &str = "node(s) had untolerated taint(s)";

const PRE_SCORE_KEY: &str = "PreScoreTaintToleration";

/// Filters on hard taints and scores on soft ones.
#[derive(Clone, Copy, Debug, Default)]
pub struct TaintToleration {
    /// Honour the `Gt`/`Lt` toleration operators (alpha gate `TaintTolerationComparisonOperators`).
    pub enable_comparison_operators: bool,
}

impl Plugin for TaintToleration {
    fn name(&self) -> &str {
        TAINT_TOLERATION
    }
    unisched_framework::serves!(as_filter, as_pre_score, as_score, as_enqueue_extensions);
}

impl FilterPlugin for TaintToleration {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if node.node().is_none() {
            return Status::error("node not found");
        }
        match find_untolerated_taint(
            node.taints(),
            tolerations(&pod.pod),
            do_not_schedule,
            self.enable_comparison_operators,
        ) {
            None => Status::success(),
            Some(taint) => {
                tracing::debug!(
                    pod = %pod.key(),
                    node = node.name(),
                    taint.key = %taint.key,
                    taint.value = taint.value.as_deref().unwrap_or(""),
                    taint.effect = %taint.effect,
                    "node had untolerated taint"
                );
                Status::unresolvable(ERR_REASON_NOT_MATCH)
            }
        }
    }
}

/// The pod's tolerations that can tolerate `PreferNoSchedule` taints (that effect or any effect).
#[derive(Clone, Debug, Default)]
struct PreScoreState(Vec<Toleration>);

fn prefer_no_schedule_tolerations(pod: &Pod) -> Vec<Toleration> {
    tolerations(pod)
        .iter()
        .filter(|t| {
            t.effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == PREFER_NO_SCHEDULE)
        })
        .cloned()
        .collect()
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(&self, state: &mut CycleState, pod: &PodInfo, _nodes: &[Arc<NodeInfo>]) -> Status {
        state.write(
            PRE_SCORE_KEY,
            PreScoreState(prefer_no_schedule_tolerations(&pod.pod)),
        );
        Status::success()
    }
}

impl ScorePlugin for TaintToleration {
    /// The number of `PreferNoSchedule` taints the pod does not tolerate (lower is better; the
    /// normalisation reverses it).
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        if node.node().is_none() {
            return Err(Status::error("node not found"));
        }
        let soft = node.taints().iter().filter(|t| t.effect == PREFER_NO_SCHEDULE);
        if soft.clone().next().is_none() {
            return Ok(0);
        }
        let computed;
        let tols: &[Toleration] = match state.read::<PreScoreState>(PRE_SCORE_KEY) {
            Ok(s) => &s.0,
            Err(_) => {
                computed = prefer_no_schedule_tolerations(&pod.pod);
                &computed
            }
        };
        let count = soft
            .filter(|t| !tolerations_tolerate(tols, t, self.enable_comparison_operators))
            .count();
        Ok(i64::try_from(count).unwrap_or(i64::MAX))
    }

    fn has_normalize(&self) -> bool {
        true
    }

    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore<'_>]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
        Status::success()
    }
}

impl EnqueueExtensions for TaintToleration {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        let cmp = self.enable_comparison_operators;
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD.or(ActionType::UPDATE_NODE_TAINT),
                    "NodeAdd|UpdateNodeTaint",
                ),
                // Queue only when the node goes from untolerated (or absent) to tolerated.
                move |pod, old, new| {
                    let (old, new) = event_nodes(old, new)?;
                    let untolerated = |n: &k8s_openapi::api::core::v1::Node| {
                        find_untolerated_taint(taints(n), tolerations(pod), do_not_schedule, cmp).is_some()
                    };
                    let was = old.is_none_or(untolerated);
                    Ok(if was && !untolerated(new) {
                        QueueingHint::Queue
                    } else {
                        QueueingHint::Skip
                    })
                },
            ),
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::UnscheduledPod,
                    ActionType::UPDATE_POD_TOLERATION,
                    "UnscheduledPodUpdatePodToleration",
                ),
                // The rejected pod gained tolerations: it may fit now.
                is_same_pod,
            ),
        ]
    }
}

fn is_same_pod(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let (_, modified) = event_pod_objects(old, new)?;
    Ok(match modified {
        Some(m) if pod_key(m) == pod_key(pod) => QueueingHint::Queue,
        _ => QueueingHint::Skip,
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Node;
    use unisched_framework::Code;

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            pod: PodBuilder,
            node: NodeBuilder,
            code: Code,
        }
        let cases = [
            Case {
                name: "no taints",
                pod: PodBuilder::new("p"),
                node: NodeBuilder::new("n"),
                code: Code::Success,
            },
            Case {
                name: "control plane taint untolerated",
                pod: PodBuilder::new("p"),
                node: NodeBuilder::new("n").taint("node-role.kubernetes.io/control-plane", "", "NoSchedule"),
                code: Code::UnschedulableAndUnresolvable,
            },
            Case {
                name: "NoExecute untolerated",
                pod: PodBuilder::new("p").toleration("dedicated", "Equal", "gpu", "NoSchedule"),
                node: NodeBuilder::new("n").taint("dedicated", "gpu", "NoExecute"),
                code: Code::UnschedulableAndUnresolvable,
            },
            Case {
                name: "tolerated by equal",
                pod: PodBuilder::new("p").toleration("dedicated", "Equal", "gpu", "NoSchedule"),
                node: NodeBuilder::new("n").taint("dedicated", "gpu", "NoSchedule"),
                code: Code::Success,
            },
            Case {
                name: "tolerated by exists without effect",
                pod: PodBuilder::new("p").toleration("dedicated", "Exists", "", ""),
                node: NodeBuilder::new("n")
                    .taint("dedicated", "gpu", "NoSchedule")
                    .taint("dedicated", "x", "NoExecute"),
                code: Code::Success,
            },
            Case {
                name: "PreferNoSchedule does not filter",
                pod: PodBuilder::new("p"),
                node: NodeBuilder::new("n").taint("soft", "", "PreferNoSchedule"),
                code: Code::Success,
            },
            Case {
                name: "one of two tolerated",
                pod: PodBuilder::new("p").toleration("a", "Exists", "", ""),
                node: NodeBuilder::new("n")
                    .taint("a", "", "NoSchedule")
                    .taint("b", "", "NoSchedule"),
                code: Code::UnschedulableAndUnresolvable,
            },
        ];
        for c in cases {
            let s = TaintToleration::default().filter(&CycleState::new(), &c.pod.info(), &c.node.info());
            assert_eq!(s.code(), c.code, "{}", c.name);
            if !s.is_success() {
                assert_eq!(s.message(), ERR_REASON_NOT_MATCH, "{}", c.name);
            }
        }
    }

    #[test]
    fn score_and_normalize() {
        struct Case {
            name: &'static str,
            pod: PodBuilder,
            nodes: Vec<NodeBuilder>,
            want: Vec<i64>,
        }
        let cases = [
            Case {
                name: "fewer intolerable taints score higher",
                pod: PodBuilder::new("p").toleration("a", "Equal", "1", "PreferNoSchedule"),
                nodes: vec![
                    NodeBuilder::new("n0"),
                    NodeBuilder::new("n1").taint("a", "1", "PreferNoSchedule").taint(
                        "b",
                        "",
                        "PreferNoSchedule",
                    ),
                    NodeBuilder::new("n2").taint("b", "", "PreferNoSchedule").taint(
                        "c",
                        "",
                        "PreferNoSchedule",
                    ),
                ],
                want: vec![100, 50, 0],
            },
            Case {
                name: "NoSchedule-only toleration does not help scoring",
                pod: PodBuilder::new("p").toleration("a", "Exists", "", "NoSchedule"),
                nodes: vec![
                    NodeBuilder::new("n0").taint("a", "", "PreferNoSchedule"),
                    NodeBuilder::new("n1"),
                ],
                want: vec![0, 100],
            },
            Case {
                name: "hard taints are not counted",
                pod: PodBuilder::new("p"),
                nodes: vec![
                    NodeBuilder::new("n0").taint("a", "", "NoSchedule"),
                    NodeBuilder::new("n1"),
                ],
                want: vec![100, 100],
            },
        ];
        let pl = TaintToleration::default();
        for c in cases {
            let pod = c.pod.info();
            let nodes: Vec<Arc<NodeInfo>> = c.nodes.into_iter().map(|n| Arc::new(n.info())).collect();
            let mut state = CycleState::new();
            assert!(pl.pre_score(&mut state, &pod, &nodes).is_success(), "{}", c.name);
            let mut scores: Vec<NodeScore<'_>> = nodes
                .iter()
                .map(|n| NodeScore {
                    name: n.name(),
                    score: pl.score(&state, &pod, n).unwrap(),
                })
                .collect();
            assert!(pl.normalize_score(&state, &pod, &mut scores).is_success());
            let got: Vec<i64> = scores.iter().map(|s| s.score).collect();
            assert_eq!(got, c.want, "{}", c.name);
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
                name: "clean node added",
                old: None,
                new: NodeBuilder::new("n").build(),
                want: QueueingHint::Queue,
            },
            Case {
                name: "tainted node added",
                old: None,
                new: NodeBuilder::new("n").taint("x", "", "NoSchedule").build(),
                want: QueueingHint::Skip,
            },
            Case {
                name: "taint removed",
                old: Some(NodeBuilder::new("n").taint("x", "", "NoSchedule").build()),
                new: NodeBuilder::new("n").build(),
                want: QueueingHint::Queue,
            },
            Case {
                name: "was already tolerated",
                old: Some(NodeBuilder::new("n").build()),
                new: NodeBuilder::new("n")
                    .taint("soft", "", "PreferNoSchedule")
                    .build(),
                want: QueueingHint::Skip,
            },
            Case {
                name: "still untolerated",
                old: Some(NodeBuilder::new("n").taint("x", "", "NoSchedule").build()),
                new: NodeBuilder::new("n").taint("y", "", "NoSchedule").build(),
                want: QueueingHint::Skip,
            },
        ];
        let events = TaintToleration::default().events_to_register();
        let hint = events[0].hint.clone().unwrap();
        let pod = PodBuilder::new("p").build();
        for c in cases {
            let old = c.old.map(|n| EventObject::Node(Arc::new(n)));
            let new = EventObject::Node(Arc::new(c.new));
            assert_eq!(
                hint(&pod, old.as_ref(), Some(&new)).unwrap(),
                c.want,
                "{}",
                c.name
            );
        }
        let pod_hint = events[1].hint.clone().unwrap();
        let same = EventObject::pod(PodBuilder::new("p").toleration("x", "Exists", "", "").build());
        let other = EventObject::pod(PodBuilder::new("q").build());
        assert_eq!(
            pod_hint(&pod, Some(&same), Some(&same)).unwrap(),
            QueueingHint::Queue
        );
        assert_eq!(
            pod_hint(&pod, Some(&other), Some(&other)).unwrap(),
            QueueingHint::Skip
        );
    }

    /// Upstream `TestIsSchedulableAfterNodeChange`, case by case.
    #[test]
    fn is_schedulable_after_node_change() {
        let node = |taints: &[(&str, &str)]| {
            EventObject::Node(Arc::new(
                taints
                    .iter()
                    .fold(NodeBuilder::new("nodeA"), |n, (k, v)| n.taint(k, v, "NoSchedule"))
                    .build(),
            ))
        };
        let not_a_node = || EventObject::pod(PodBuilder::new("x").build());
        let pod = PodBuilder::new("pod1")
            .toleration("dedicated", "Equal", "user2", "NoSchedule")
            .build();
        // `None` as the expected hint: the hint must fail.
        let cases: Vec<(
            &str,
            Option<EventObject>,
            Option<EventObject>,
            Option<QueueingHint>,
        )> = vec![
            ("backoff-wrong-new-object", None, Some(not_a_node()), None),
            (
                "backoff-wrong-old-object",
                Some(not_a_node()),
                Some(node(&[("dedicated", "user1")])),
                None,
            ),
            (
                "skip-queue-on-untoleratedtaint-node-added",
                None,
                Some(node(&[("dedicated", "user1")])),
                Some(QueueingHint::Skip),
            ),
            (
                "queue-on-toleratedtaint-node-added",
                None,
                Some(node(&[("dedicated", "user2")])),
                Some(QueueingHint::Queue),
            ),
            (
                "skip-unrelated-change",
                Some(node(&[("dedicated", "user1")])),
                Some(node(&[("dedicated", "user1"), ("dedicated", "user3")])),
                Some(QueueingHint::Skip),
            ),
            (
                "queue-on-taint-change",
                Some(node(&[("dedicated", "user1")])),
                Some(node(&[("dedicated", "user2")])),
                Some(QueueingHint::Queue),
            ),
        ];
        let events = TaintToleration::default().events_to_register();
        let hint = events[0].hint.clone().unwrap();
        for (name, old, new, want) in cases {
            let got = hint(&pod, old.as_ref(), new.as_ref());
            match want {
                Some(want) => assert_eq!(got.unwrap(), want, "{name}"),
                None => assert!(got.is_err(), "{name}: want an error, got {got:?}"),
            }
        }
    }

    /// Upstream `Test_isSchedulableAfterTargetPodTolerationChange`: the waiting pod's own new
    /// toleration requeues it.
    #[test]
    fn is_schedulable_after_target_pod_toleration_change() {
        let events = TaintToleration::default().events_to_register();
        let registered = events
            .iter()
            .find(|e| e.event.resource == EventResource::UnscheduledPod)
            .unwrap();
        assert_eq!(registered.event.action, ActionType::UPDATE_POD_TOLERATION);
        let hint = registered.hint.clone().unwrap();
        let pod = PodBuilder::new("pod-1").namespace("ns-1").uid("").build();
        let old = EventObject::pod(pod.clone());
        let new = EventObject::pod(
            PodBuilder::new("pod-1")
                .namespace("ns-1")
                .uid("")
                .toleration("foo", "", "", "NoSchedule")
                .build(),
        );
        assert_eq!(
            hint(&pod, Some(&old), Some(&new)).unwrap(),
            QueueingHint::Queue,
            "queue-on-toleration-added"
        );
    }
}
