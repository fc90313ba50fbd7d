//! `NodeName`: a pod with `spec.nodeName` can only go to that node (upstream `nodename`).
//!
//! PreFilter narrows the candidates to that one node, so the other nodes are never filtered (they
//! are reported as not satisfying the plugin). For a pod without `spec.nodeName` PreFilter returns
//! Skip, which skips a Filter that would accept every node anyway (upstream returns Success; the
//! outcome is the same).

use std::sync::Arc;

use unisched_framework::{
    ActionType, ClusterEvent, ClusterEventWithHint, CycleState, EnqueueExtensions, EventResource,
    FilterPlugin, NodeInfo, Plugin, PodInfo, PreFilterPlugin, PreFilterResult, Status,
};

use crate::names::NODE_NAME;

/// Rejection reason for every other node.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// Restricts a pod with `spec.nodeName` to that node.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &str {
        NODE_NAME
    }
    unisched_framework::serves!(as_pre_filter, as_filter, as_enqueue_extensions);
}

impl PreFilterPlugin for NodeName {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
    ) -> (Option<PreFilterResult>, Status) {
        match pod.node_name() {
            Some(name) => (Some(PreFilterResult::nodes([name])), Status::success()),
            None => (None, Status::skip()),
        }
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match pod.node_name() {
            Some(wanted) if wanted != node.name() => Status::unresolvable(ERR_REASON),
            _ => Status::success(),
        }
    }
}

impl EnqueueExtensions for NodeName {
    fn events_to_register(&self) -> Vec<ClusterEventWithHint> {
        vec![ClusterEventWithHint::new(ClusterEvent::new(
            EventResource::Node,
            ActionType::ADD,
            "NodeAdd",
        ))]
    }
}

#[cfg(test)]
mod tests {
    use unisched_framework::Code;

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn filter_and_pre_filter_table() {
        struct Case {
            name: &'static str,
            pod: PodInfo,
            node: &'static str,
            filter: Code,
            pre_filter: (Option<PreFilterResult>, Code),
        }
        let cases = [
            Case {
                name: "no node name",
                pod: PodBuilder::new("p").info(),
                node: "n1",
                filter: Code::Success,
                pre_filter: (None, Code::Skip),
            },
            Case {
                name: "matching node",
                pod: PodBuilder::new("p").node_name("n1").info(),
                node: "n1",
                filter: Code::Success,
                pre_filter: (Some(PreFilterResult::nodes(["n1"])), Code::Success),
            },
            Case {
                name: "other node",
                pod: PodBuilder::new("p").node_name("n2").info(),
                node: "n1",
                filter: Code::UnschedulableAndUnresolvable,
                pre_filter: (Some(PreFilterResult::nodes(["n2"])), Code::Success),
            },
        ];
        for c in cases {
            let node = NodeBuilder::new(c.node).info();
            let s = NodeName.filter(&CycleState::new(), &c.pod, &node);
            assert_eq!(s.code(), c.filter, "{}", c.name);
            if !s.is_success() {
                assert_eq!(s.message(), ERR_REASON, "{}", c.name);
            }
            let (r, s) = NodeName.pre_filter(&mut CycleState::new(), &c.pod, &[]);
            assert_eq!((r, s.code()), c.pre_filter, "{}", c.name);
        }
    }

    #[test]
    fn registers_node_add() {
        let events = NodeName.events_to_register();
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].event.resource, EventResource::Node);
        assert_eq!(events[0].event.action, ActionType::ADD);
        assert!(events[0].hint.is_none());
    }
}
