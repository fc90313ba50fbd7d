//! Compact builders for pods and nodes, and a recording binder, for tests here and in other crates
//! (enable the `testing` feature).
//!
//! ```text
//! let pod = PodBuilder::new("p").req("cpu", "100m").req("memory", "128Mi").priority(10).info();
//! let node = NodeBuilder::new("n1").alloc("cpu", "4").alloc("memory", "8Gi").label("zone", "a").info();
//! ```
//!
//! Builders never fail: they produce API objects, and whatever a test puts in them is what the
//! scheduler sees (invalid quantities included, which is useful for negative tests).

use std::{collections::BTreeMap, sync::Arc};

use k8s_openapi::{
    api::core::v1::{
        Affinity, Container, ContainerPort, Node, NodeAffinity as ApiNodeAffinity, NodeSelector,
        NodeSelectorRequirement, NodeSelectorTerm, NodeSpec, NodeStatus, Pod, PodSchedulingGate, PodSpec,
        PodStatus, PreferredSchedulingTerm, ResourceRequirements, Taint, Toleration,
    },
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::ObjectMeta},
};
use parking_lot::Mutex;
use unisched_framework::{Framework, NodeInfo, PodInfo, Snapshot, config::KubeSchedulerProfile};

use crate::{BindError, Binder, PluginContext, Registry};

fn q(s: &str) -> Quantity {
    Quantity(s.to_string())
}

/// Builds a pod. Resource calls apply to the last container (one container `c0` exists from the start).
#[derive(Clone, Debug)]
pub struct PodBuilder {
    pod: Pod,
}

impl PodBuilder {
    /// A pod `name` in namespace `default` with UID `name` and one container without requests.
    pub fn new(name: &str) -> Self {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                namespace: Some("default".to_string()),
                uid: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c0".to_string(),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus::default()),
        };
        PodBuilder { pod }
    }

    fn spec(&mut self) -> &mut PodSpec {
        self.pod.spec.get_or_insert_with(PodSpec::default)
    }

    fn last_container(&mut self) -> &mut Container {
        let spec = self.spec();
        if spec.containers.is_empty() {
            spec.containers.push(Container {
                name: "c0".to_string(),
                ..Container::default()
            });
        }
        let i = spec.containers.len() - 1;
        &mut spec.containers[i]
    }

    /// Sets the namespace.
    #[must_use]
    pub fn namespace(mut self, ns: &str) -> Self {
        self.pod.metadata.namespace = Some(ns.to_string());
        self
    }

    /// Sets the UID (empty string removes it).
    #[must_use]
    pub fn uid(mut self, uid: &str) -> Self {
        self.pod.metadata.uid = Some(uid.to_string()).filter(|u| !u.is_empty());
        self
    }

    /// Adds a label.
    #[must_use]
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), value.to_string());
        self
    }

    /// Adds another regular container; later resource calls apply to it.
    #[must_use]
    pub fn container(mut self, name: &str) -> Self {
        self.spec().containers.push(Container {
            name: name.to_string(),
            ..Container::default()
        });
        self
    }

    /// A request on the last container, e.g. `req("cpu", "100m")`.
    #[must_use]
    pub fn req(mut self, resource: &str, quantity: &str) -> Self {
        let c = self.last_container();
        c.resources
            .get_or_insert_with(ResourceRequirements::default)
            .requests
            .get_or_insert_with(BTreeMap::new)
            .insert(resource.to_string(), q(quantity));
        self
    }

    /// A limit on the last container.
    #[must_use]
    pub fn limit(mut self, resource: &str, quantity: &str) -> Self {
        let c = self.last_container();
        c.resources
            .get_or_insert_with(ResourceRequirements::default)
            .limits
            .get_or_insert_with(BTreeMap::new)
            .insert(resource.to_string(), q(quantity));
        self
    }

    fn add_init(mut self, name: &str, requests: &[(&str, &str)], sidecar: bool) -> Self {
        let requests: BTreeMap<String, Quantity> =
            requests.iter().map(|(k, v)| (k.to_string(), q(v))).collect();
        self.spec()
            .init_containers
            .get_or_insert_with(Vec::new)
            .push(Container {
                name: name.to_string(),
                restart_policy: sidecar.then(|| "Always".to_string()),
                resources: Some(ResourceRequirements {
                    requests: Some(requests),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            });
        self
    }

    /// Adds a classic init container with requests.
    #[must_use]
    pub fn init_container(self, name: &str, requests: &[(&str, &str)]) -> Self {
        self.add_init(name, requests, false)
    }

    /// Adds a sidecar (restartable init container) with requests.
    #[must_use]
    pub fn sidecar(self, name: &str, requests: &[(&str, &str)]) -> Self {
        self.add_init(name, requests, true)
    }

    /// Adds `spec.overhead`.
    #[must_use]
    pub fn overhead(mut self, resource: &str, quantity: &str) -> Self {
        self.spec()
            .overhead
            .get_or_insert_with(BTreeMap::new)
            .insert(resource.to_string(), q(quantity));
        self
    }

    /// Adds a toleration; empty strings leave a field unset.
    #[must_use]
    pub fn toleration(mut self, key: &str, operator: &str, value: &str, effect: &str) -> Self {
        let opt = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
        self.spec()
            .tolerations
            .get_or_insert_with(Vec::new)
            .push(Toleration {
                key: opt(key),
                operator: opt(operator),
                value: opt(value),
                effect: opt(effect),
                toleration_seconds: None,
            });
        self
    }

    /// Adds a `spec.nodeSelector` entry.
    #[must_use]
    pub fn node_selector(mut self, key: &str, value: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), value.to_string());
        self
    }

    fn node_affinity(&mut self) -> &mut ApiNodeAffinity {
        self.spec()
            .affinity
            .get_or_insert_with(Affinity::default)
            .node_affinity
            .get_or_insert_with(ApiNodeAffinity::default)
    }

    /// Adds a required node-affinity term (terms are ORed).
    #[must_use]
    pub fn required_term(mut self, term: NodeSelectorTerm) -> Self {
        self.node_affinity()
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(|| NodeSelector {
                node_selector_terms: Vec::new(),
            })
            .node_selector_terms
            .push(term);
        self
    }

    /// Adds a preferred node-affinity term.
    #[must_use]
    pub fn preferred_term(mut self, weight: i32, term: NodeSelectorTerm) -> Self {
        self.node_affinity()
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PreferredSchedulingTerm {
                weight,
                preference: term,
            });
        self
    }

    /// A TCP host port on all addresses, on the last container.
    #[must_use]
    pub fn host_port(self, port: i32) -> Self {
        self.host_port_on("", "", port)
    }

    /// A host port with an explicit IP and protocol (empty strings leave them unset).
    #[must_use]
    pub fn host_port_on(mut self, ip: &str, protocol: &str, port: i32) -> Self {
        let opt = |s: &str| Some(s.to_string()).filter(|s| !s.is_empty());
        self.last_container()
            .ports
            .get_or_insert_with(Vec::new)
            .push(ContainerPort {
                container_port: port,
                host_port: Some(port),
                host_ip: opt(ip),
                protocol: opt(protocol),
                name: None,
            });
        self
    }

    /// Adds an init container holding a TCP host port on all addresses; `sidecar` sets
    /// `restartPolicy: Always`.
    #[must_use]
    pub fn init_host_port(mut self, port: i32, sidecar: bool) -> Self {
        self.spec()
            .init_containers
            .get_or_insert_with(Vec::new)
            .push(Container {
                name: format!("init-{port}"),
                restart_policy: sidecar.then(|| "Always".to_string()),
                ports: Some(vec![ContainerPort {
                    container_port: port,
                    host_port: Some(port),
                    ..ContainerPort::default()
                }]),
                ..Container::default()
            });
        self
    }

    /// Sets `spec.priority`.
    #[must_use]
    pub fn priority(mut self, p: i32) -> Self {
        self.spec().priority = Some(p);
        self
    }

    /// Sets `spec.preemptionPolicy` (`Never` or `PreemptLowerPriority`).
    #[must_use]
    pub fn preemption_policy(mut self, policy: &str) -> Self {
        self.spec().preemption_policy = Some(policy.to_string());
        self
    }

    /// Sets `spec.nodeName` (a bound pod).
    #[must_use]
    pub fn node_name(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.to_string());
        self
    }

    /// Sets `status.nominatedNodeName`.
    #[must_use]
    pub fn nominated_node(mut self, node: &str) -> Self {
        self.pod
            .status
            .get_or_insert_with(PodStatus::default)
            .nominated_node_name = Some(node.to_string());
        self
    }

    /// Adds a scheduling gate.
    #[must_use]
    pub fn scheduling_gate(mut self, name: &str) -> Self {
        self.spec()
            .scheduling_gates
            .get_or_insert_with(Vec::new)
            .push(PodSchedulingGate {
                name: name.to_string(),
            });
        self
    }

    /// Sets `spec.schedulerName`.
    #[must_use]
    pub fn scheduler_name(mut self, name: &str) -> Self {
        self.spec().scheduler_name = Some(name.to_string());
        self
    }

    /// Sets `spec.schedulingGroup.podGroupName`.
    #[must_use]
    pub fn pod_group(mut self, name: &str) -> Self {
        self.spec().scheduling_group = Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
            pod_group_name: Some(name.to_string()),
        });
        self
    }

    /// The pod.
    pub fn build(self) -> Pod {
        self.pod
    }

    /// The pod as a `PodInfo`.
    pub fn info(self) -> PodInfo {
        PodInfo::new(self.pod)
    }

    /// The pod as a shared `PodInfo`.
    pub fn arc(self) -> Arc<PodInfo> {
        Arc::new(self.info())
    }
}

/// A node-selector requirement.
pub fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.to_string(),
        operator: operator.to_string(),
        values: Some(values.iter().map(|v| v.to_string()).collect()).filter(|v: &Vec<String>| !v.is_empty()),
    }
}

/// A term of label requirements.
pub fn term(expressions: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(expressions),
        match_fields: None,
    }
}

/// A term of field requirements (`metadata.name`).
pub fn field_term(fields: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: None,
        match_fields: Some(fields),
    }
}

/// A term `key In values`.
pub fn term_in(key: &str, values: &[&str]) -> NodeSelectorTerm {
    term(vec![requirement(key, "In", values)])
}

/// Builds a node. Allocatable starts with `pods: 110`, as a kubelet reports by default.
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    node: Node,
}

impl NodeBuilder {
    /// A node `name` with `pods: 110` allocatable and nothing else.
    pub fn new(name: &str) -> Self {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                allocatable: Some([("pods".to_string(), q("110"))].into_iter().collect()),
                ..NodeStatus::default()
            }),
        };
        NodeBuilder { node }
    }

    /// An allocatable amount, e.g. `alloc("cpu", "4")`.
    #[must_use]
    pub fn alloc(mut self, resource: &str, quantity: &str) -> Self {
        self.node
            .status
            .get_or_insert_with(NodeStatus::default)
            .allocatable
            .get_or_insert_with(BTreeMap::new)
            .insert(resource.to_string(), q(quantity));
        self
    }

    /// Adds a label.
    #[must_use]
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.node
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(key.to_string(), value.to_string());
        self
    }

    /// Adds a taint (empty value leaves it unset).
    #[must_use]
    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.node
            .spec
            .get_or_insert_with(NodeSpec::default)
            .taints
            .get_or_insert_with(Vec::new)
            .push(Taint {
                key: key.to_string(),
                value: Some(value.to_string()).filter(|v| !v.is_empty()),
                effect: effect.to_string(),
                time_added: None,
            });
        self
    }

    /// Sets `spec.unschedulable` (cordoned).
    #[must_use]
    pub fn unschedulable(mut self, yes: bool) -> Self {
        self.node.spec.get_or_insert_with(NodeSpec::default).unschedulable = Some(yes);
        self
    }

    /// Sets `status.declaredFeatures` (the API server keeps it sorted; so should callers).
    #[must_use]
    pub fn declared_features(mut self, features: &[&str]) -> Self {
        self.node
            .status
            .get_or_insert_with(NodeStatus::default)
            .declared_features = Some(features.iter().map(|f| f.to_string()).collect());
        self
    }

    /// The node.
    pub fn build(self) -> Node {
        self.node
    }

    /// The node as a `NodeInfo` without pods.
    pub fn info(self) -> NodeInfo {
        NodeInfo::new(Arc::new(self.node))
    }

    /// The node as a `NodeInfo` with these pods on it.
    pub fn info_with(self, pods: impl IntoIterator<Item = PodInfo>) -> NodeInfo {
        let mut ni = self.info();
        for p in pods {
            ni.add_pod(Arc::new(p));
        }
        ni
    }
}

/// A snapshot of the given nodes, in order.
pub fn snapshot(nodes: impl IntoIterator<Item = NodeInfo>) -> Arc<Snapshot> {
    Arc::new(Snapshot::from_node_infos(nodes))
}

/// A binder that records bindings, and fails with a set error when told to.
#[derive(Debug, Default)]
pub struct RecordingBinder {
    bindings: Mutex<Vec<(String, String)>>,
    fail_with: Mutex<Option<BindError>>,
}

impl RecordingBinder {
    /// A binder that accepts every binding.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// `(namespace/name, node)` of every successful binding, in order.
    pub fn bindings(&self) -> Vec<(String, String)> {
        self.bindings.lock().clone()
    }

    /// Makes every later binding fail with `err` (`None` to succeed again).
    pub fn fail_with(&self, err: Option<BindError>) {
        *self.fail_with.lock() = err;
    }
}

impl Binder for RecordingBinder {
    fn bind(&self, pod: &Pod, node: &str) -> Result<(), BindError> {
        if let Some(err) = self.fail_with.lock().clone() {
            return Err(err);
        }
        let key = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or("default"),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        self.bindings.lock().push((key, node.to_string()));
        Ok(())
    }
}

/// The in-tree registry over a fresh [`RecordingBinder`].
pub fn in_tree_registry() -> (Registry, Arc<RecordingBinder>) {
    let binder = RecordingBinder::new();
    (Registry::in_tree(PluginContext::new(binder.clone())), binder)
}

/// The default profile built from the in-tree registry.
///
/// # Panics
/// When the default profile does not build, which is a bug in this crate or the framework.
pub fn default_framework() -> (Framework, Arc<RecordingBinder>) {
    let (registry, binder) = in_tree_registry();
    match Framework::new(&KubeSchedulerProfile::default(), &registry) {
        Ok(fwk) => (fwk, binder),
        Err(e) => panic!("the default profile must build: {e}"),
    }
}

// Builders for PodTopologySpread, InterPodAffinity and ImageLocality tests: spread constraints, pod
// (anti-)affinity terms, owner references, terminating pods, container images and node images.

/// A label selector from `matchLabels` pairs and `matchExpressions` (`(key, operator, values)`).
pub fn label_selector(
    match_labels: &[(&str, &str)],
    expressions: &[(&str, &str, &[&str])],
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
    LabelSelector {
        match_labels: Some(
            match_labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
        .filter(|m: &BTreeMap<String, String>| !m.is_empty()),
        match_expressions: Some(
            expressions
                .iter()
                .map(|(k, op, values)| LabelSelectorRequirement {
                    key: k.to_string(),
                    operator: op.to_string(),
                    values: Some(values.iter().map(|v| v.to_string()).collect())
                        .filter(|v: &Vec<String>| !v.is_empty()),
                })
                .collect(),
        )
        .filter(|e: &Vec<LabelSelectorRequirement>| !e.is_empty()),
    }
}

/// A selector `key Exists`.
pub fn selector_exists(key: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
    label_selector(&[], &[(key, "Exists", &[])])
}

/// A selector `key In values`.
pub fn selector_in(
    key: &str,
    values: &[&str],
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
    label_selector(&[], &[(key, "In", values)])
}

/// A pod (anti-)affinity term over `topology_key` in the owning pod's namespace.
pub fn affinity_term(
    selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    topology_key: &str,
) -> k8s_openapi::api::core::v1::PodAffinityTerm {
    k8s_openapi::api::core::v1::PodAffinityTerm {
        label_selector: Some(selector),
        topology_key: topology_key.to_string(),
        ..Default::default()
    }
}

/// A topology spread constraint.
pub fn spread_constraint(
    max_skew: i32,
    topology_key: &str,
    when_unsatisfiable: &str,
    selector: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
) -> k8s_openapi::api::core::v1::TopologySpreadConstraint {
    k8s_openapi::api::core::v1::TopologySpreadConstraint {
        max_skew,
        topology_key: topology_key.to_string(),
        when_unsatisfiable: when_unsatisfiable.to_string(),
        label_selector: selector,
        ..Default::default()
    }
}

impl PodBuilder {
    /// Adds a topology spread constraint.
    #[must_use]
    pub fn spread(mut self, constraint: k8s_openapi::api::core::v1::TopologySpreadConstraint) -> Self {
        self.spec()
            .topology_spread_constraints
            .get_or_insert_with(Vec::new)
            .push(constraint);
        self
    }

    /// Adds a `DoNotSchedule` (hard) or `ScheduleAnyway` (soft) spread constraint.
    #[must_use]
    pub fn spread_constraint(
        self,
        max_skew: i32,
        topology_key: &str,
        when_unsatisfiable: &str,
        selector: k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    ) -> Self {
        self.spread(spread_constraint(
            max_skew,
            topology_key,
            when_unsatisfiable,
            Some(selector),
        ))
    }

    fn affinity(&mut self) -> &mut Affinity {
        self.spec().affinity.get_or_insert_with(Affinity::default)
    }

    /// Adds a required pod-affinity term.
    #[must_use]
    pub fn pod_affinity(mut self, term: k8s_openapi::api::core::v1::PodAffinityTerm) -> Self {
        self.affinity()
            .pod_affinity
            .get_or_insert_with(Default::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }

    /// Adds a required pod anti-affinity term.
    #[must_use]
    pub fn pod_anti_affinity(mut self, term: k8s_openapi::api::core::v1::PodAffinityTerm) -> Self {
        self.affinity()
            .pod_anti_affinity
            .get_or_insert_with(Default::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }

    /// Adds a preferred pod-affinity term.
    #[must_use]
    pub fn preferred_pod_affinity(
        mut self,
        weight: i32,
        term: k8s_openapi::api::core::v1::PodAffinityTerm,
    ) -> Self {
        self.affinity()
            .pod_affinity
            .get_or_insert_with(Default::default)
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(k8s_openapi::api::core::v1::WeightedPodAffinityTerm {
                weight,
                pod_affinity_term: term,
            });
        self
    }

    /// Adds a preferred pod anti-affinity term.
    #[must_use]
    pub fn preferred_pod_anti_affinity(
        mut self,
        weight: i32,
        term: k8s_openapi::api::core::v1::PodAffinityTerm,
    ) -> Self {
        self.affinity()
            .pod_anti_affinity
            .get_or_insert_with(Default::default)
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(k8s_openapi::api::core::v1::WeightedPodAffinityTerm {
                weight,
                pod_affinity_term: term,
            });
        self
    }

    /// Adds a controller owner reference (`apiVersion`, `kind`, `name`).
    #[must_use]
    pub fn owner(mut self, api_version: &str, kind: &str, name: &str) -> Self {
        self.pod
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: api_version.to_string(),
                kind: kind.to_string(),
                name: name.to_string(),
                uid: format!("{name}-uid"),
                controller: Some(true),
                block_owner_deletion: None,
            });
        self
    }

    /// Marks the pod as being deleted.
    #[must_use]
    pub fn terminating(mut self) -> Self {
        self.pod.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        self
    }

    /// Sets the image of the last container.
    #[must_use]
    pub fn image(mut self, image: &str) -> Self {
        self.last_container().image = Some(image.to_string());
        self
    }

    /// Adds an init container running `image`.
    #[must_use]
    pub fn init_image(mut self, name: &str, image: &str) -> Self {
        self.spec()
            .init_containers
            .get_or_insert_with(Vec::new)
            .push(Container {
                name: name.to_string(),
                image: Some(image.to_string()),
                ..Container::default()
            });
        self
    }
}

impl NodeBuilder {
    /// Adds an image (with its names) to `status.images`.
    #[must_use]
    pub fn image(mut self, names: &[&str], size_bytes: i64) -> Self {
        self.node
            .status
            .get_or_insert_with(NodeStatus::default)
            .images
            .get_or_insert_with(Vec::new)
            .push(k8s_openapi::api::core::v1::ContainerImage {
                names: Some(names.iter().map(|n| n.to_string()).collect()),
                size_bytes: Some(size_bytes),
            });
        self
    }
}

/// Fills every node's `image_states` from `status.images`, counting each image name over these
/// nodes (what the cache does for a real cluster).
pub fn with_image_states(mut nodes: Vec<NodeInfo>) -> Vec<NodeInfo> {
    let images = |ni: &NodeInfo| -> Vec<(String, i64)> {
        let mut out = Vec::new();
        let status = ni.node().and_then(|n| n.status.clone()).unwrap_or_default();
        for image in status.images.unwrap_or_default() {
            for name in image.names.unwrap_or_default() {
                if !out.iter().any(|(n, _)| *n == name) {
                    out.push((name, image.size_bytes.unwrap_or(0)));
                }
            }
        }
        out
    };
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for ni in &nodes {
        for (name, _) in images(ni) {
            *counts.entry(name).or_default() += 1;
        }
    }
    for ni in &mut nodes {
        ni.image_states = images(ni)
            .into_iter()
            .map(|(name, size)| {
                let num_nodes = counts.get(&name).copied().unwrap_or(0);
                (name, unisched_framework::ImageStateSummary { size, num_nodes })
            })
            .collect();
    }
    nodes
}

/// A [`unisched_framework::FrameworkHandle`] with no Filter plugins, no PreFilter extensions and no
/// nominations: every dry run fits. For PostFilter tests that do not simulate anything.
#[derive(Clone, Copy, Debug, Default)]
pub struct NullHandle;

impl unisched_framework::FrameworkHandle for NullHandle {
    fn profile_name(&self) -> &str {
        "default-scheduler"
    }

    fn run_filter_with_nominated(
        &self,
        _state: &unisched_framework::CycleState,
        _pod: &PodInfo,
        _node: &NodeInfo,
    ) -> unisched_framework::Status {
        unisched_framework::Status::success()
    }

    fn run_pre_filter_add_pod(
        &self,
        _state: &mut unisched_framework::CycleState,
        _pod: &PodInfo,
        _to_add: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> unisched_framework::Status {
        unisched_framework::Status::success()
    }

    fn run_pre_filter_remove_pod(
        &self,
        _state: &mut unisched_framework::CycleState,
        _pod: &PodInfo,
        _to_remove: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> unisched_framework::Status {
        unisched_framework::Status::success()
    }

    fn nominated_pods_for_node(&self, _node: &str) -> Vec<Arc<PodInfo>> {
        Vec::new()
    }
}

/// Runs a plugin's future whose calls never wait (the test fakes') to its end with one poll.
///
/// # Panics
/// When the future waits: a test fake that does is a bug in the test.
pub fn poll_to_end(mut future: unisched_framework::StatusFuture) -> unisched_framework::Status {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match future.as_mut().poll(&mut cx) {
        std::task::Poll::Ready(s) => s,
        std::task::Poll::Pending => panic!("a test fake's future waited"),
    }
}
