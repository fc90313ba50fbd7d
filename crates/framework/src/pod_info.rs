//! `PodInfo` and `QueuedPodInfo`: a pod plus what the scheduler derives from it once.
//!
//! Request math, host ports and affinity flags are computed when the pod enters the scheduler, not in
//! every Filter call on every node. A `PodInfo` is immutable and shared (`Arc`); a changed pod gets a
//! new `PodInfo`.

use std::{collections::BTreeSet, sync::Arc, time::Instant};

use k8s_openapi::api::core::v1::Pod;
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
        }
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
}
