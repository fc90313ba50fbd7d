//! `NodePorts`: a pod's host ports must be free on the node (upstream `nodeports`).
//!
//! The rejection is `Unschedulable` (not unresolvable): evicting the pod that holds the port frees
//! it, so preemption can help.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EnqueueExtensions, EventObject,
    EventResource, FilterPlugin, HostPort, HostPortInfo, NodeInfo, Plugin, PodInfo, PreFilterPlugin,
    PreFilterResult, QueueingHint, QueueingHintError, Status,
};

use crate::{helper::event_pods, names::NODE_PORTS};

/// Rejection reason.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

const PRE_FILTER_KEY: &str = "PreFilterNodePorts";

/// Host-port conflicts.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &str {
        NODE_PORTS
    }
    unisched_framework::serves!(as_pre_filter, as_filter, as_enqueue_extensions);
}

/// The pod's host ports, collected once.
#[derive(Clone, Debug, Default)]
struct PreFilterState(Vec<HostPort>);

fn fits(wanted: &[HostPort], in_use: &HostPortInfo) -> bool {
    !wanted.iter().any(|p| in_use.conflicts(p))
}

impl PreFilterPlugin for NodePorts {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        if pod.host_ports.is_empty() {
            return (None, Status::skip());
        }
        state.write(PRE_FILTER_KEY, PreFilterState(pod.host_ports.clone()));
        (None, Status::success())
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let wanted = match state.read::<PreFilterState>(PRE_FILTER_KEY) {
            Ok(s) => s.0.as_slice(),
            Err(_) => pod.host_ports.as_slice(),
        };
        if fits(wanted, &node.used_ports) {
            Status::success()
        } else {
            Status::unschedulable(ERR_REASON)
        }
    }
}

/// Queue when an assigned pod holding a port this pod wants was deleted.
fn assigned_pod_deleted(
    pod: &Pod,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Result<QueueingHint, QueueingHintError> {
    let (deleted, _) = event_pods(old, new)?;
    let Some(deleted) = deleted else {
        return Ok(QueueingHint::Skip);
    };
    let assigned = deleted
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let nominated = deleted
        .pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if !assigned && !nominated {
        return Ok(QueueingHint::Skip);
    }
    let freed = &deleted.host_ports;
    if freed.is_empty() {
        return Ok(QueueingHint::Skip);
    }
    let mut freed_ports = HostPortInfo::default();
    for p in freed {
        freed_ports.add(p);
    }
    let wanted = PodInfo::new(pod.clone()).host_ports;
    Ok(if fits(&wanted, &freed_ports) {
        QueueingHint::Skip
    } else {
        QueueingHint::Queue
    })
}

impl EnqueueExtensions for NodePorts {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![
            ClusterEventWithHint::with_hint(
                ClusterEvent::new(
                    EventResource::AssignedPod,
                    ActionType::DELETE,
                    "AssignedPodDelete",
                ),
                assigned_pod_deleted,
            ),
            ClusterEventWithHint::new(ClusterEvent::new(EventResource::Node, ActionType::ADD, "NodeAdd")),
        ]
    }
}

#[cfg(test)]
mod tests {
    use unisched_framework::Code;

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn filter_table() {
        struct Case {
            name: &'static str,
            pod: PodBuilder,
            existing: Vec<PodBuilder>,
            code: Code,
        }
        let on = |name: &str| PodBuilder::new(name).node_name("n");
        let cases = [
            Case {
                name: "no ports skips",
                pod: PodBuilder::new("p"),
                existing: vec![on("e").host_port(80)],
                code: Code::Skip,
            },
            Case {
                name: "free port",
                pod: PodBuilder::new("p").host_port(8080),
                existing: vec![on("e").host_port(80)],
                code: Code::Success,
            },
            Case {
                name: "same port",
                pod: PodBuilder::new("p").host_port(80),
                existing: vec![on("e").host_port(80)],
                code: Code::Unschedulable,
            },
            Case {
                name: "different protocol",
                pod: PodBuilder::new("p").host_port_on("", "UDP", 53),
                existing: vec![on("e").host_port_on("", "TCP", 53)],
                code: Code::Success,
            },
            Case {
                name: "different specific ips",
                pod: PodBuilder::new("p").host_port_on("10.0.0.2", "TCP", 80),
                existing: vec![on("e").host_port_on("10.0.0.1", "TCP", 80)],
                code: Code::Success,
            },
            Case {
                name: "wildcard vs specific",
                pod: PodBuilder::new("p").host_port(80),
                existing: vec![on("e").host_port_on("10.0.0.1", "TCP", 80)],
                code: Code::Unschedulable,
            },
            Case {
                name: "specific vs wildcard",
                pod: PodBuilder::new("p").host_port_on("10.0.0.1", "TCP", 80),
                existing: vec![on("e").host_port(80)],
                code: Code::Unschedulable,
            },
            Case {
                name: "SCTP conflict",
                pod: PodBuilder::new("p").host_port_on("", "SCTP", 9000),
                existing: vec![on("e").host_port_on("", "SCTP", 9000)],
                code: Code::Unschedulable,
            },
            Case {
                name: "init container port of the incoming pod is not held",
                pod: PodBuilder::new("p").init_host_port(80, false),
                existing: vec![on("e").host_port(80)],
                code: Code::Skip,
            },
            Case {
                name: "init container port of an existing pod is not held",
                pod: PodBuilder::new("p").host_port(80),
                existing: vec![on("e").init_host_port(80, false)],
                code: Code::Success,
            },
            Case {
                name: "sidecar port of the incoming pod conflicts",
                pod: PodBuilder::new("p").init_host_port(80, true),
                existing: vec![on("e").host_port(80)],
                code: Code::Unschedulable,
            },
            Case {
                name: "sidecar port of an existing pod conflicts",
                pod: PodBuilder::new("p").host_port(80),
                existing: vec![on("e").init_host_port(80, true)],
                code: Code::Unschedulable,
            },
            Case {
                name: "sidecar ports on both sides conflict",
                pod: PodBuilder::new("p").init_host_port(8080, true),
                existing: vec![on("e").init_host_port(8080, true)],
                code: Code::Unschedulable,
            },
        ];
        for c in cases {
            let pod = c.pod.info();
            let node = NodeBuilder::new("n").info_with(c.existing.into_iter().map(PodBuilder::info));
            let mut state = CycleState::new();
            let (_, pre) = NodePorts.pre_filter(&mut state, &pod, &[]);
            let s = if pre.is_skip() {
                pre
            } else {
                NodePorts.filter(&state, &pod, &node)
            };
            assert_eq!(s.code(), c.code, "{}", c.name);
            if s.code() == Code::Unschedulable {
                assert_eq!(s.message(), ERR_REASON, "{}", c.name);
            }
        }
    }

    #[test]
    fn deleted_pod_hint_table() {
        struct Case {
            name: &'static str,
            deleted: PodBuilder,
            want: QueueingHint,
        }
        let cases = [
            Case {
                name: "holder of the port deleted",
                deleted: PodBuilder::new("d").node_name("n").host_port(80),
                want: QueueingHint::Queue,
            },
            Case {
                name: "nominated holder deleted",
                deleted: PodBuilder::new("d").nominated_node("n").host_port(80),
                want: QueueingHint::Queue,
            },
            Case {
                name: "unscheduled pod deleted",
                deleted: PodBuilder::new("d").host_port(80),
                want: QueueingHint::Skip,
            },
            Case {
                name: "pod without ports deleted",
                deleted: PodBuilder::new("d").node_name("n"),
                want: QueueingHint::Skip,
            },
            Case {
                name: "classic init container of the deleted pod held no port",
                deleted: PodBuilder::new("d").node_name("n").init_host_port(80, false),
                want: QueueingHint::Skip,
            },
            Case {
                name: "sidecar holding the port deleted",
                deleted: PodBuilder::new("d").node_name("n").init_host_port(80, true),
                want: QueueingHint::Queue,
            },
            Case {
                name: "unrelated port freed",
                deleted: PodBuilder::new("d").node_name("n").host_port(81),
                want: QueueingHint::Skip,
            },
        ];
        let target = PodBuilder::new("p").host_port(80).build();
        for c in cases {
            let old = EventObject::pod(c.deleted.build());
            assert_eq!(
                assigned_pod_deleted(&target, Some(&old), None).unwrap(),
                c.want,
                "{}",
                c.name
            );
        }
    }

    /// Upstream's `Test_isSchedulableAfterAssignedPodDeleted`, with its inputs.
    #[test]
    fn assigned_pod_deleted_upstream_cases() {
        let target = PodBuilder::new("p").host_port(8080).build();
        let cases = [
            (
                "skip-queue-on-unscheduled",
                PodBuilder::new("d"),
                QueueingHint::Skip,
            ),
            (
                "skip-queue-on-non-hostport",
                PodBuilder::new("d").node_name("fake-node"),
                QueueingHint::Skip,
            ),
            (
                "skip-queue-on-unrelated-hostport",
                PodBuilder::new("d").node_name("fake-node").host_port(8081),
                QueueingHint::Skip,
            ),
            (
                "queue-on-released-hostport",
                PodBuilder::new("d").node_name("fake-node").host_port(8080),
                QueueingHint::Queue,
            ),
        ];
        for (name, deleted, want) in cases {
            let old = EventObject::pod(deleted.build());
            assert_eq!(
                assigned_pod_deleted(&target, Some(&old), None).unwrap(),
                want,
                "{name}"
            );
        }
        // backoff-wrong-old-object: anything but a pod is an error (the queue then requeues).
        let wrong = EventObject::Node(Arc::new(NodeBuilder::new("n").build()));
        assert!(assigned_pod_deleted(&target, Some(&wrong), None).is_err());
    }
}
