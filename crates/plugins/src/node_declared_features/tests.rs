//! Upstream's tables (`nodedeclaredfeatures_test.go`) over the real feature registry: upstream
//! mocks features by name; here pods that need real features stand in for them. Upstream's cases
//! for a disabled plugin and for a feature past its maximum version have no counterpart: the gate
//! is locked on and no 1.37.2 feature has a maximum version.

use k8s_openapi::api::core::v1::{ContainerRestartRule, VolumeMount};
use unisched_framework::Code;

use super::*;
use crate::testing::{NodeBuilder, PodBuilder};

const RESTART_ALL: &str = "RestartAllContainersOnContainerExits";
const HOST_NETWORK_USERNS: &str = "UserNamespacesHostNetworkSupport";
const BIND_MOUNT_OPTIONS: &str = "VolumeBindMountOptions";

/// A pod `p` that needs the given registered features.
fn pod_needing(features: &[&str]) -> Pod {
    let mut pod = PodBuilder::new("p").uid("123").container("c").build();
    let spec = pod.spec.get_or_insert_with(Default::default);
    for f in features {
        match *f {
            RESTART_ALL => {
                spec.containers[0].restart_policy_rules = Some(vec![ContainerRestartRule {
                    action: "RestartAllContainers".into(),
                    ..ContainerRestartRule::default()
                }])
            }
            HOST_NETWORK_USERNS => {
                spec.host_network = Some(true);
                spec.host_users = Some(false);
            }
            BIND_MOUNT_OPTIONS => {
                spec.containers[0].volume_mounts = Some(vec![VolumeMount {
                    name: "v".into(),
                    mount_path: "/v".into(),
                    bind_mount_options: Some(vec!["ro".into()]),
                    ..VolumeMount::default()
                }])
            }
            other => panic!("no pod shape needs {other}"),
        }
    }
    pod
}

#[test]
fn pre_filter_table() {
    struct Case {
        name: &'static str,
        pod: Pod,
        code: Code,
        state: Option<Vec<&'static str>>,
    }
    let cases = [
        Case {
            name: "pod with feature requirements",
            pod: pod_needing(&[RESTART_ALL]),
            code: Code::Success,
            state: Some(vec![RESTART_ALL]),
        },
        Case {
            name: "pod with multiple feature requirements",
            pod: pod_needing(&[HOST_NETWORK_USERNS, RESTART_ALL]),
            code: Code::Success,
            state: Some(vec![RESTART_ALL, HOST_NETWORK_USERNS]),
        },
        Case {
            name: "pod with no requirements",
            pod: pod_needing(&[]),
            code: Code::Skip,
            state: None,
        },
    ];
    for c in cases {
        let mut state = CycleState::new();
        let (result, status) = NodeDeclaredFeatures.pre_filter(&mut state, &PodInfo::new(c.pod), &[]);
        assert!(result.is_none(), "{}: PreFilter never narrows the nodes", c.name);
        assert_eq!(status.code(), c.code, "{}", c.name);
        let got = state
            .read::<PreFilterState>(PRE_FILTER_KEY)
            .ok()
            .map(|s| s.0.clone());
        assert_eq!(got, c.state, "{}", c.name);
    }
}

#[test]
fn filter_table() {
    struct Case {
        name: &'static str,
        node: NodeBuilder,
        pre_filter: Option<Vec<&'static str>>,
        code: Code,
    }
    let cases = [
        Case {
            name: "node matches requirements",
            node: NodeBuilder::new("node-1").declared_features(&[RESTART_ALL, HOST_NETWORK_USERNS]),
            pre_filter: Some(vec![RESTART_ALL]),
            code: Code::Success,
        },
        Case {
            name: "node does not match requirements",
            node: NodeBuilder::new("node-1").declared_features(&[HOST_NETWORK_USERNS]),
            pre_filter: Some(vec![RESTART_ALL]),
            code: Code::UnschedulableAndUnresolvable,
        },
        Case {
            name: "node with multiple features, pod requires subset",
            node: NodeBuilder::new("node-multi").declared_features(&[
                RESTART_ALL,
                HOST_NETWORK_USERNS,
                BIND_MOUNT_OPTIONS,
            ]),
            pre_filter: Some(vec![RESTART_ALL, BIND_MOUNT_OPTIONS]),
            code: Code::Success,
        },
        Case {
            name: "node has no declared features",
            node: NodeBuilder::new("node-1"),
            pre_filter: Some(vec![RESTART_ALL]),
            code: Code::UnschedulableAndUnresolvable,
        },
        Case {
            name: "node declares an empty list",
            node: NodeBuilder::new("node-1").declared_features(&[]),
            pre_filter: Some(vec![RESTART_ALL]),
            code: Code::UnschedulableAndUnresolvable,
        },
        Case {
            name: "node with some but not all required features",
            node: NodeBuilder::new("node-1").declared_features(&[RESTART_ALL]),
            pre_filter: Some(vec![RESTART_ALL, HOST_NETWORK_USERNS]),
            code: Code::UnschedulableAndUnresolvable,
        },
        Case {
            name: "features the registry does not know are ignored",
            node: NodeBuilder::new("node-1").declared_features(&["FutureFeature", RESTART_ALL]),
            pre_filter: Some(vec![RESTART_ALL]),
            code: Code::Success,
        },
        // Upstream: an internal error. unisched infers the needs again from the pod, which here
        // needs RESTART_ALL (see `pod_needing` below).
        Case {
            name: "no pre-filter state",
            node: NodeBuilder::new("node-1"),
            pre_filter: None,
            code: Code::UnschedulableAndUnresolvable,
        },
    ];
    for c in cases {
        let mut state = CycleState::new();
        if let Some(required) = c.pre_filter {
            state.write(PRE_FILTER_KEY, PreFilterState(required));
        }
        let pod = PodInfo::new(pod_needing(&[RESTART_ALL]));
        let s = NodeDeclaredFeatures.filter(&state, &pod, &c.node.info());
        assert_eq!(s.code(), c.code, "{}", c.name);
        if !s.is_success() {
            assert_eq!(s.message(), ERR_REASON_UNSATISFIED_REQUIREMENTS, "{}", c.name);
        }
    }
}

#[test]
fn node_hint_table() {
    struct Case {
        name: &'static str,
        old: Option<NodeBuilder>,
        new: NodeBuilder,
        want: QueueingHint,
    }
    let cases = [
        Case {
            name: "node add with feature",
            old: None,
            new: NodeBuilder::new("node-1").declared_features(&["FeatureA"]),
            want: QueueingHint::Queue,
        },
        Case {
            name: "node add without features",
            old: None,
            new: NodeBuilder::new("node-1"),
            want: QueueingHint::Queue,
        },
        Case {
            name: "node update, features added",
            old: Some(NodeBuilder::new("node-1")),
            new: NodeBuilder::new("node-1").declared_features(&["FeatureA"]),
            want: QueueingHint::Queue,
        },
        Case {
            name: "node update, features removed",
            old: Some(NodeBuilder::new("node-1").declared_features(&["FeatureA", "FeatureB"])),
            new: NodeBuilder::new("node-1").declared_features(&["FeatureA"]),
            want: QueueingHint::Queue,
        },
        Case {
            name: "node update, features unchanged",
            old: Some(NodeBuilder::new("node-1").declared_features(&["FeatureA"])),
            new: NodeBuilder::new("node-1")
                .declared_features(&["FeatureA"])
                .label("x", "y"),
            want: QueueingHint::Skip,
        },
        Case {
            name: "absent list and empty list are the same",
            old: Some(NodeBuilder::new("node-1")),
            new: NodeBuilder::new("node-1").declared_features(&[]),
            want: QueueingHint::Skip,
        },
    ];
    let events = NodeDeclaredFeatures.events_to_register();
    let Some(hint) = events[0].hint.clone() else {
        panic!("the node event has a hint")
    };
    let pod = pod_needing(&[RESTART_ALL]);
    for c in cases {
        let old = c.old.map(|n| EventObject::Node(Arc::new(n.build())));
        let new = EventObject::Node(Arc::new(c.new.build()));
        assert_eq!(
            hint(&pod, old.as_ref(), Some(&new)).ok(),
            Some(c.want),
            "{}",
            c.name
        );
    }
}

#[test]
fn pod_update_hint_table() {
    struct Case {
        name: &'static str,
        old: Pod,
        new: Pod,
        want: QueueingHint,
    }
    let other = |mut p: Pod| {
        p.metadata.uid = Some("456".into());
        p.metadata.name = Some("q".into());
        p
    };
    let cases = [
        Case {
            name: "pod update adds a requirement",
            old: pod_needing(&[]),
            new: pod_needing(&[RESTART_ALL]),
            want: QueueingHint::Queue,
        },
        Case {
            name: "pod update removes a requirement",
            old: pod_needing(&[RESTART_ALL]),
            new: pod_needing(&[]),
            want: QueueingHint::Queue,
        },
        Case {
            name: "pod update with no change in requirements",
            old: pod_needing(&[RESTART_ALL]),
            new: {
                let mut p = pod_needing(&[RESTART_ALL]);
                p.metadata.labels = Some([("foo".to_string(), "bar".to_string())].into());
                p
            },
            want: QueueingHint::Skip,
        },
        Case {
            name: "another pod's update",
            old: other(pod_needing(&[])),
            new: other(pod_needing(&[RESTART_ALL])),
            want: QueueingHint::Skip,
        },
    ];
    let events = NodeDeclaredFeatures.events_to_register();
    let Some(hint) = events[1].hint.clone() else {
        panic!("the pod event has a hint")
    };
    let target = pod_needing(&[RESTART_ALL]);
    for c in cases {
        let (old, new) = (EventObject::pod(c.old), EventObject::pod(c.new));
        assert_eq!(
            hint(&target, Some(&old), Some(&new)).ok(),
            Some(c.want),
            "{}",
            c.name
        );
    }
}

#[test]
fn registers_node_and_pod_events() {
    let events = NodeDeclaredFeatures.events_to_register();
    assert_eq!(events.len(), 2);
    let declared_change = ClusterEvent::new(
        EventResource::Node,
        ActionType::UPDATE_NODE_DECLARED_FEATURE,
        "NodeDeclaredFeatureChange",
    );
    assert!(events[0].event.matches(&declared_change));
    assert!(events[0].event.matches(&unisched_framework::well_known::NODE_ADD));
    let label_change = ClusterEvent::new(
        EventResource::Node,
        ActionType::UPDATE_NODE_LABEL,
        "NodeLabelChange",
    );
    assert!(!events[0].event.matches(&label_change));
}
