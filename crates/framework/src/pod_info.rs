//! `PodInfo` and `QueuedPodInfo`: a pod plus what the scheduler derives from it once.
//!
//! Request math, host ports and affinity flags are computed when the pod enters the scheduler, not in
//! every Filter call on every node. A `PodInfo` is immutable and shared (`Arc`); a changed pod gets a
//! new `PodInfo`.
//!
//! A pod bound to a node is kept [lean](PodInfo::lean): once its requests and host ports are
//! derived, its containers are never read again (Filter and Score of other pods, queueing hints
//! and preemption read the derived fields, the labels, affinity, volumes and claims), yet a
//! decoded `Container` is 2.3 KB of mostly empty fields before its strings and resource maps. At
//! 150,000 bound pods the containers were over half of the scheduler's memory.

use std::{collections::BTreeSet, sync::Arc, time::Instant};

use k8s_openapi::api::core::v1::{Pod, Volume};
use unisched_resource::{InvalidQuantity, PodResources, Resource, pod_resources};

/// A host port a container asks for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    /// Host IP, `0.0.0.0` when unset.
    pub ip: String,
    /// `TCP`, `UDP` or `SCTP` (`TCP` when unset).
    pub protocol: String,
    /// The host port (> 0).
    pub port: i32,
}

/// A pod and what the scheduler derives from it.
#[derive(Clone, Debug)]
pub struct PodInfo {
    /// The pod object.
    pub pod: Arc<Pod>,
    /// The cache key: the pod UID, or `namespace/name` when the UID is empty (never in a real cluster).
    pub uid: String,
    /// `metadata.namespace` (`default` when unset).
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `spec.priority`, 0 when unset.
    pub priority: i32,
    /// Requests (exact and non-zero variants), including overhead and DRA node-allocatable statuses.
    pub resources: PodResources,
    /// Host ports of the regular containers and of the sidecars (init containers with
    /// `restartPolicy: Always`), as upstream: a classic init container has exited before the
    /// pod's containers start, so its ports are not held while the pod runs.
    pub host_ports: Vec<HostPort>,
    /// The pod has pod affinity or anti-affinity terms (required or preferred).
    pub has_affinity: bool,
    /// The pod has required pod anti-affinity terms.
    pub has_required_anti_affinity: bool,
    /// `pod` had its containers and container statuses dropped ([`PodInfo::lean`]); the derived
    /// fields still describe them.
    pub lean: bool,
}

/// Gives back an optional vector's spare room, for decoded objects the scheduler keeps: decoding
/// grows a vector by `push`, which leaves room for four, and the room stays as long as the object.
pub fn shrink_vec<T>(v: &mut Option<Vec<T>>) {
    if let Some(v) = v {
        v.shrink_to_fit();
    }
}

impl PodInfo {
    /// Derives everything from the pod.
    pub fn new(pod: Pod) -> Self {
        Self::from_arc(Arc::new(pod))
    }

    /// Like [`PodInfo::new`] for an already shared pod.
    pub fn from_arc(pod: Arc<Pod>) -> Self {
        let meta = &pod.metadata;
        let namespace = meta.namespace.clone().unwrap_or_else(|| "default".to_string());
        let name = meta.name.clone().unwrap_or_default();
        let uid = Self::uid_of(&pod);
        let spec = pod.spec.as_ref();
        let priority = spec.and_then(|s| s.priority).unwrap_or(0);
        let mut host_ports = Vec::new();
        if let Some(spec) = spec {
            let sidecars = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"));
            for c in sidecars.chain(spec.containers.iter()) {
                for p in c.ports.iter().flatten() {
                    if let Some(port) = p.host_port.filter(|p| *p > 0) {
                        host_ports.push(HostPort {
                            ip: p
                                .host_ip
                                .clone()
                                .filter(|s| !s.is_empty())
                                .unwrap_or_else(|| "0.0.0.0".into()),
                            protocol: p
                                .protocol
                                .clone()
                                .filter(|s| !s.is_empty())
                                .unwrap_or_else(|| "TCP".into()),
                            port,
                        });
                    }
                }
            }
        }
        let affinity = spec.and_then(|s| s.affinity.as_ref());
        let has_affinity =
            affinity.is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some());
        let has_required_anti_affinity = affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
            .is_some_and(|t| !t.is_empty());
        let resources = pod_resources(&pod);
        PodInfo {
            pod,
            uid,
            namespace,
            name,
            priority,
            resources,
            host_ports,
            has_affinity,
            has_required_anti_affinity,
            lean: false,
        }
    }

    /// A pod as the scheduler keeps what a watch delivered: [lean](PodInfo::into_lean) once it
    /// is bound to a node, whole while it waits to be scheduled.
    pub fn watched(pod: Pod) -> Self {
        let info = Self::new(pod);
        if info.node_name().is_some() {
            info.into_lean()
        } else {
            info
        }
    }

    /// This pod as the scheduler keeps it once it is bound: the same derived fields, and a `pod`
    /// without containers, init and ephemeral containers, their statuses, and the volumes no
    /// scheduling decision reads (projected, ConfigMap, Secret, downward API and emptyDir
    /// volumes: the service-account token volume every pod gets is ~6.7 KB decoded, more than
    /// the rest of a lean pod together), nor `dnsPolicy`, `restartPolicy`, the service account
    /// names and `status.qosClass`. Everything else of the object stays: metadata, affinity,
    /// tolerations, scheduler name, priority and preemption policy, claim and disk volumes,
    /// resource claims, conditions, phase.
    ///
    /// What was derived from the containers must be read from the derived fields on a lean pod:
    /// [`PodInfo::requests`], [`PodInfo::non_zero_requests`], [`PodInfo::host_ports`] and
    /// [`PodInfo::invalid_quantities`]. A `PodInfo` derived anew from a lean `pod` would have
    /// none of them, so nothing derives one. The pod object is not copied when this `PodInfo`
    /// was its only holder.
    pub fn into_lean(mut self) -> PodInfo {
        if self.lean {
            return self;
        }
        let mut pod = Arc::unwrap_or_clone(self.pod);
        if let Some(spec) = pod.spec.as_mut() {
            spec.containers = Vec::new();
            spec.init_containers = None;
            spec.ephemeral_containers = None;
            // Defaults admission sets on every pod that no scheduling decision reads; each is a
            // heap string (32 bytes with the allocator's overhead), ~20 MB over 145,000 pods.
            spec.dns_policy = None;
            spec.restart_policy = None;
            spec.service_account = None;
            spec.service_account_name = None;
            if let Some(volumes) = spec.volumes.as_mut() {
                volumes.retain(|v| !unread_by_scheduling(v));
                if volumes.is_empty() {
                    spec.volumes = None;
                }
            }
            // A vector decoded element by element keeps room for four: two default tolerations
            // per pod left ~40 MB unused over 145,000 pods.
            shrink_vec(&mut spec.tolerations);
            shrink_vec(&mut spec.volumes);
            shrink_vec(&mut spec.resource_claims);
            shrink_vec(&mut spec.topology_spread_constraints);
        }
        shrink_vec(&mut pod.metadata.owner_references);
        shrink_vec(&mut pod.metadata.finalizers);
        if let Some(status) = pod.status.as_mut() {
            status.container_statuses = None;
            status.init_container_statuses = None;
            status.ephemeral_container_statuses = None;
            status.qos_class = None;
            shrink_vec(&mut status.conditions);
            shrink_vec(&mut status.resource_claim_statuses);
            shrink_vec(&mut status.pod_ips);
            shrink_vec(&mut status.host_ips);
        }
        self.pod = Arc::new(pod);
        self.lean = true;
        self
    }

    /// The cache key [`PodInfo::uid`] would have for `pod`, without deriving anything else.
    pub fn uid_of(pod: &Pod) -> String {
        let meta = &pod.metadata;
        match meta.uid.as_deref() {
            Some(u) if !u.is_empty() => u.to_string(),
            _ => format!(
                "{}/{}",
                meta.namespace.as_deref().unwrap_or("default"),
                meta.name.as_deref().unwrap_or_default()
            ),
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// `spec.nodeName`, when set.
    pub fn node_name(&self) -> Option<&str> {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    /// `status.nominatedNodeName`, when set.
    pub fn nominated_node_name(&self) -> Option<&str> {
        self.pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .filter(|n| !n.is_empty())
    }

    /// `spec.schedulerName` (`default-scheduler` when unset, as the API server defaults it).
    pub fn scheduler_name(&self) -> &str {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler")
    }

    /// Exact requests (spec, overhead and DRA node-allocatable statuses).
    pub fn requests(&self) -> &Resource {
        &self.resources.requests
    }

    /// Requests with the non-zero defaults scoring uses for cpu and memory.
    pub fn non_zero_requests(&self) -> &Resource {
        &self.resources.non_zero
    }

    /// Resource entries that did not parse; the pod cannot be scheduled until they are fixed.
    pub fn invalid_quantities(&self) -> &[InvalidQuantity] {
        &self.resources.invalid
    }

    /// A copy of this pod bound to `node`: the pod the cache assumes.
    pub fn assumed_on(&self, node: &str) -> PodInfo {
        let mut pod = (*self.pod).clone();
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_name = Some(node.to_string());
        }
        let mut info = self.clone();
        info.pod = Arc::new(pod);
        info
    }

    /// The pod is being deleted.
    pub fn is_terminating(&self) -> bool {
        self.pod.metadata.deletion_timestamp.is_some()
    }
}

/// A volume kind no plugin reads on a bound pod: no conflicts (VolumeRestrictions), no attach
/// limits (NodeVolumeLimits), no topology, no claims.
fn unread_by_scheduling(v: &Volume) -> bool {
    v.projected.is_some()
        || v.config_map.is_some()
        || v.secret.is_some()
        || v.downward_api.is_some()
        || v.empty_dir.is_some()
}

/// A pod in the scheduling queue, with the bookkeeping that decides when it is retried.
#[derive(Clone, Debug)]
pub struct QueuedPodInfo {
    /// The pod.
    pub pod_info: Arc<PodInfo>,
    /// When the pod was last added to the queue (backoff counts from here).
    pub timestamp: Instant,
    /// When the pod was first popped for an attempt (for the scheduling SLI).
    pub initial_attempt_timestamp: Option<Instant>,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// Attempts that ended with a plugin rejecting the pod.
    pub unschedulable_count: u32,
    /// Consecutive attempts that ended with an error (reset by a rejection).
    pub consecutive_errors_count: u32,
    /// Plugins that rejected the pod in its last attempt (Unschedulable/UnschedulableAndUnresolvable).
    pub unschedulable_plugins: BTreeSet<String>,
    /// Plugins that returned Pending in its last attempt.
    pub pending_plugins: BTreeSet<String>,
    /// The PreEnqueue plugin that gates the pod, if any.
    pub gating_plugin: Option<String>,
}

impl QueuedPodInfo {
    /// A freshly queued pod.
    pub fn new(pod_info: Arc<PodInfo>, now: Instant) -> Self {
        QueuedPodInfo {
            pod_info,
            timestamp: now,
            initial_attempt_timestamp: None,
            attempts: 0,
            unschedulable_count: 0,
            consecutive_errors_count: 0,
            unschedulable_plugins: BTreeSet::new(),
            pending_plugins: BTreeSet::new(),
            gating_plugin: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;

    fn pod(namespace: Option<&str>, name: &str, uid: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                namespace: namespace.map(str::to_string),
                name: Some(name.to_string()),
                uid: uid.map(str::to_string),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn uid_of_is_the_cache_key_pod_info_derives() {
        for (p, want) in [
            (pod(Some("ns"), "a", Some("u-1")), "u-1"),
            (pod(Some("ns"), "a", Some("")), "ns/a"),
            (pod(Some("ns"), "a", None), "ns/a"),
            (pod(None, "a", None), "default/a"),
        ] {
            assert_eq!(PodInfo::uid_of(&p), want);
            assert_eq!(PodInfo::new(p).uid, want);
        }
    }

    fn pod_json(node: Option<&str>) -> Pod {
        let mut v = serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "ns", "uid": "u-0", "labels": {"app": "web"}},
            "spec": {
                "priority": 7,
                "schedulerName": "unisched",
                "preemptionPolicy": "PreemptLowerPriority",
                "dnsPolicy": "ClusterFirst",
                "restartPolicy": "Always",
                "serviceAccount": "default",
                "serviceAccountName": "default",
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                                 "effect": "NoExecute", "tolerationSeconds": 300}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "web"}}}
                ]}},
                "initContainers": [
                    {"name": "proxy", "image": "proxy", "restartPolicy": "Always",
                     "ports": [{"containerPort": 15000, "hostPort": 15000}],
                     "resources": {"requests": {"cpu": "100m"}}}
                ],
                "containers": [
                    {"name": "app", "image": "app", "env": [{"name": "A", "value": "1"}],
                     "ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}],
                     "resources": {"requests": {"cpu": "1", "memory": "1Gi", "example.com/gpu": "2"}}}
                ],
                "volumes": [
                    {"name": "kube-api-access", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
                    ]}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "scratch", "emptyDir": {}},
                    {"name": "disk", "csi": {"driver": "disk.example.com"}},
                    {"name": "config", "configMap": {"name": "c"}},
                    {"name": "creds", "secret": {"secretName": "s"}},
                    {"name": "info", "downwardAPI": {"items": []}}
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
            },
            "status": {
                "phase": "Running",
                "qosClass": "Burstable",
                "containerStatuses": [{"name": "app", "image": "app", "imageID": "", "ready": true, "restartCount": 0}],
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
            }
        });
        if let Some(node) = node {
            v["spec"]["nodeName"] = serde_json::json!(node);
        }
        // From text, as a watch decodes it (vectors grow by push: room is left over).
        serde_json::from_str(&v.to_string()).expect("a valid pod")
    }

    #[test]
    fn a_lean_pod_keeps_what_it_derived_and_what_scheduling_reads() {
        let full = PodInfo::new(pod_json(Some("n1")));
        // Its own decoding, not a clone of `full` (a clone's vectors have no spare room).
        let lean = PodInfo::new(pod_json(Some("n1"))).into_lean();
        assert!(lean.lean && !full.lean);
        let (spec, status) = (lean.pod.spec.as_ref().unwrap(), lean.pod.status.as_ref().unwrap());
        assert!(spec.containers.is_empty() && spec.init_containers.is_none());
        assert!(status.container_statuses.is_none());
        assert!(
            spec.dns_policy.is_none()
                && spec.restart_policy.is_none()
                && spec.service_account.is_none()
                && spec.service_account_name.is_none()
                && status.qos_class.is_none()
        );
        let full_spec = full.pod.spec.as_ref().unwrap();
        assert!(full_spec.dns_policy.is_some() && full_spec.service_account_name.is_some());
        assert!(full.pod.status.as_ref().unwrap().qos_class.is_some());
        assert_eq!(spec.scheduler_name, full_spec.scheduler_name);
        assert_eq!(spec.preemption_policy, full_spec.preemption_policy);
        assert_eq!(spec.tolerations, full_spec.tolerations);
        // Kept vectors give back the room decoding left.
        let full_tolerations = full_spec.tolerations.as_ref().unwrap();
        assert!(full_tolerations.capacity() > full_tolerations.len());
        let tolerations = spec.tolerations.as_ref().unwrap();
        assert_eq!(tolerations.capacity(), tolerations.len());
        let claims = spec.resource_claims.as_ref().unwrap();
        assert_eq!(claims.capacity(), claims.len());
        // Derived from the containers before they went.
        assert_eq!(lean.requests(), full.requests());
        assert_eq!(lean.requests().milli_cpu, 1100);
        assert_eq!(lean.requests().scalar_resources.get("example.com/gpu"), Some(&2));
        assert_eq!(lean.non_zero_requests(), full.non_zero_requests());
        assert_eq!(lean.host_ports, full.host_ports);
        assert_eq!(lean.host_ports.len(), 2);
        assert_eq!(
            (lean.priority, lean.has_required_anti_affinity, lean.node_name()),
            (7, true, Some("n1"))
        );
        // What other pods' Filter, Score and hints read stays.
        assert_eq!(lean.pod.metadata, full.pod.metadata);
        assert_eq!(spec.affinity, full_spec.affinity);
        // Claim and disk volumes stay (conflicts, attach limits); the others go.
        let names: Vec<&str> = spec.volumes.iter().flatten().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["data", "disk"]);
        assert_eq!(full_spec.volumes.as_ref().map(Vec::len), Some(7));
        assert_eq!(spec.resource_claims, full_spec.resource_claims);
        let full_status = full.pod.status.as_ref().unwrap();
        assert_eq!(status.phase, full_status.phase);
        assert_eq!(
            status.resource_claim_statuses,
            full_status.resource_claim_statuses
        );
        // Idempotent.
        assert_eq!(lean.clone().into_lean().pod, lean.pod);
    }

    #[test]
    fn a_watched_pod_is_lean_only_once_bound() {
        let pending = PodInfo::watched(pod_json(None));
        assert!(!pending.lean);
        assert_eq!(pending.pod.spec.as_ref().unwrap().containers.len(), 1);
        let bound = PodInfo::watched(pod_json(Some("n1")));
        assert!(bound.lean);
        assert!(bound.pod.spec.as_ref().unwrap().containers.is_empty());
        // The pod the cache assumes for a pending pod keeps its containers until the watch
        // confirms the binding.
        let assumed = pending.assumed_on("n1");
        assert!(!assumed.lean);
        assert_eq!(assumed.pod.spec.as_ref().unwrap().containers.len(), 1);
    }
}
