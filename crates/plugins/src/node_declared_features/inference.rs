//! Which declared node features a pod needs, read from its spec: the feature registry of
//! Kubernetes 1.37.2 (`k8s.io/component-helpers/nodedeclaredfeatures`) and each feature's rule.
//!
//! A kubelet lists in `status.declaredFeatures` the features it supports; the registry is the
//! shared vocabulary between kubelets, the API server and schedulers. Most registered features only
//! matter to pod *updates* (in-place resize of pod-level resources, init containers or memory-backed
//! volumes) or to no pod at all; three are needed to *run* a pod, and those are the ones the
//! scheduler infers. A feature unknown to this table is never required, whatever a node declares.
//!
//! Upstream lets a feature stop being required once every supported kubelet has it (a maximum
//! version compared with the scheduler's own); no feature of 1.37.2 sets one, so the table has no
//! such column.

use k8s_openapi::api::core::v1::{Container, PodSpec, VolumeMount};

/// One registered feature: its name as kubelets declare it, and whether a pod spec needs it to be
/// scheduled.
pub(crate) struct DeclaredFeature {
    pub(crate) name: &'static str,
    pub(crate) needed_by: fn(&PodSpec) -> bool,
}

/// The registry of 1.37.2, sorted by name (the order of `status.declaredFeatures`).
pub(crate) const REGISTRY: &[DeclaredFeature] = &[
    DeclaredFeature {
        name: "DRANodeAllocatableResources",
        needed_by: never,
    },
    // Needed only by claims whose allocation asks for optional node operations, which are
    // allocated after scheduling; DynamicResources checks those itself.
    DeclaredFeature {
        name: "DRAOptionalNodeOperations",
        needed_by: never,
    },
    DeclaredFeature {
        name: "ExtendWebSocketsToKubelet",
        needed_by: never,
    },
    DeclaredFeature {
        name: "InPlacePodLevelResourcesVerticalScaling",
        needed_by: never,
    },
    DeclaredFeature {
        name: "InPlacePodVerticalScalingInitContainers",
        needed_by: never,
    },
    DeclaredFeature {
        name: "InPlacePodVerticalScalingMemoryBackedVolumes",
        needed_by: never,
    },
    DeclaredFeature {
        name: "RestartAllContainersOnContainerExits",
        needed_by: restarts_all_containers,
    },
    DeclaredFeature {
        name: "UserNamespacesHostNetworkSupport",
        needed_by: host_network_in_user_namespace,
    },
    DeclaredFeature {
        name: "VolumeBindMountOptions",
        needed_by: uses_bind_mount_options,
    },
];

/// Features that no pod needs in order to be scheduled (update-only or node-side features).
fn never(_: &PodSpec) -> bool {
    false
}

/// A container or init container has a restart rule whose action restarts the whole pod.
fn restarts_all_containers(spec: &PodSpec) -> bool {
    let restarts_all = |c: &Container| {
        c.restart_policy_rules
            .iter()
            .flatten()
            .any(|rule| rule.action == "RestartAllContainers")
    };
    spec.containers.iter().any(restarts_all) || spec.init_containers.iter().flatten().any(restarts_all)
}

/// The pod runs in the host's network namespace and in its own user namespace.
fn host_network_in_user_namespace(spec: &PodSpec) -> bool {
    spec.host_network == Some(true) && spec.host_users == Some(false)
}

/// A volume mount of any container (regular, init or ephemeral) sets bind mount options.
fn uses_bind_mount_options(spec: &PodSpec) -> bool {
    let has_options = |mounts: Option<&Vec<VolumeMount>>| {
        mounts
            .into_iter()
            .flatten()
            .any(|m| m.bind_mount_options.as_ref().is_some_and(|o| !o.is_empty()))
    };
    spec.containers
        .iter()
        .any(|c| has_options(c.volume_mounts.as_ref()))
        || spec
            .init_containers
            .iter()
            .flatten()
            .any(|c| has_options(c.volume_mounts.as_ref()))
        || spec
            .ephemeral_containers
            .iter()
            .flatten()
            .any(|c| has_options(c.volume_mounts.as_ref()))
}

/// The names of the registered features `spec` needs, in registry (sorted) order.
pub(crate) fn required_features(spec: &PodSpec) -> Vec<&'static str> {
    REGISTRY
        .iter()
        .filter(|f| (f.needed_by)(spec))
        .map(|f| f.name)
        .collect()
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerRestartRule, EphemeralContainer};

    use super::*;

    fn container(name: &str) -> Container {
        Container {
            name: name.into(),
            ..Container::default()
        }
    }

    fn restart_rule(action: &str) -> ContainerRestartRule {
        ContainerRestartRule {
            action: action.into(),
            ..ContainerRestartRule::default()
        }
    }

    fn mount(options: &[&str]) -> VolumeMount {
        VolumeMount {
            name: "v".into(),
            mount_path: "/v".into(),
            bind_mount_options: Some(options.iter().map(|o| o.to_string()).collect()),
            ..VolumeMount::default()
        }
    }

    #[test]
    fn registry_is_sorted_and_unique() {
        let names: Vec<&str> = REGISTRY.iter().map(|f| f.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(names, sorted);
    }

    #[test]
    fn inference_table() {
        struct Case {
            name: &'static str,
            spec: PodSpec,
            want: Vec<&'static str>,
        }
        let with = |f: &dyn Fn(&mut PodSpec)| {
            let mut spec = PodSpec {
                containers: vec![container("c")],
                ..PodSpec::default()
            };
            f(&mut spec);
            spec
        };
        let cases = [
            Case {
                name: "plain pod needs nothing",
                spec: with(&|_| {}),
                want: vec![],
            },
            Case {
                name: "container restart rule RestartAllContainers",
                spec: with(&|s| {
                    s.containers[0].restart_policy_rules = Some(vec![restart_rule("RestartAllContainers")])
                }),
                want: vec!["RestartAllContainersOnContainerExits"],
            },
            Case {
                name: "init container restart rule RestartAllContainers",
                spec: with(&|s| {
                    let mut c = container("init");
                    c.restart_policy_rules = Some(vec![
                        restart_rule("Restart"),
                        restart_rule("RestartAllContainers"),
                    ]);
                    s.init_containers = Some(vec![c]);
                }),
                want: vec!["RestartAllContainersOnContainerExits"],
            },
            Case {
                name: "restart rule that restarts one container",
                spec: with(&|s| s.containers[0].restart_policy_rules = Some(vec![restart_rule("Restart")])),
                want: vec![],
            },
            Case {
                name: "host network in a user namespace",
                spec: with(&|s| {
                    s.host_network = Some(true);
                    s.host_users = Some(false);
                }),
                want: vec!["UserNamespacesHostNetworkSupport"],
            },
            Case {
                name: "host network with host users unset",
                spec: with(&|s| s.host_network = Some(true)),
                want: vec![],
            },
            Case {
                name: "user namespace without host network",
                spec: with(&|s| s.host_users = Some(false)),
                want: vec![],
            },
            Case {
                name: "bind mount options on a container",
                spec: with(&|s| s.containers[0].volume_mounts = Some(vec![mount(&["ro"])])),
                want: vec!["VolumeBindMountOptions"],
            },
            Case {
                name: "empty bind mount options",
                spec: with(&|s| s.containers[0].volume_mounts = Some(vec![mount(&[])])),
                want: vec![],
            },
            Case {
                name: "bind mount options on an ephemeral container",
                spec: with(&|s| {
                    s.ephemeral_containers = Some(vec![EphemeralContainer {
                        name: "debug".into(),
                        volume_mounts: Some(vec![mount(&["nosuid"])]),
                        ..EphemeralContainer::default()
                    }])
                }),
                want: vec!["VolumeBindMountOptions"],
            },
            Case {
                name: "several features, in registry order",
                spec: with(&|s| {
                    s.host_network = Some(true);
                    s.host_users = Some(false);
                    s.containers[0].restart_policy_rules = Some(vec![restart_rule("RestartAllContainers")]);
                    s.containers[0].volume_mounts = Some(vec![mount(&["ro"])]);
                }),
                want: vec![
                    "RestartAllContainersOnContainerExits",
                    "UserNamespacesHostNetworkSupport",
                    "VolumeBindMountOptions",
                ],
            },
        ];
        for c in cases {
            assert_eq!(required_features(&c.spec), c.want, "{}", c.name);
        }
    }
}
